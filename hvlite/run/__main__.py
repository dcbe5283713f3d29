import sys

from hvlite.run.launcher import main

sys.exit(main())
