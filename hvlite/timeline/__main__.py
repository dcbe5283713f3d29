import sys

from hvlite.timeline.cli import main

sys.exit(main())
