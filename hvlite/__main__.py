"""`python -m hvlite`: what this installation is built on (hvliterun --check-build)."""
import sys

from hvlite.run.launcher import check_build

sys.exit(check_build())
