"""hvliterun: start an hvlite job with the mpiexec of the MPI hvlite was built against."""
from hvlite.run.launcher import build_command, main, parse_args, parse_hosts  # noqa: F401
from hvlite.run.api import RunError, run  # noqa: F401
