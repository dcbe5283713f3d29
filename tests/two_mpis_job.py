"""Rank side of test_build's two-MPI case: the core's own binding is made to answer that MPI is
not started (as a core linked to another library than mpi4py's does), and every rank's init()
must refuse with MPILibraryError naming both libraries, not abort in the idle MPI."""
import hvlite._core.codes as codes

codes.core_mpi = lambda: (False, "Open MPI v4.1.6")

import hvlite as hvd  # noqa: E402
from mpi4py import MPI  # noqa: E402

try:
    hvd.init()
    print(f"rank {MPI.COMM_WORLD.Get_rank()}: init() went ahead", flush=True)
except ImportError as e:
    print(f"rank {MPI.COMM_WORLD.Get_rank()} refused: {type(e).__name__} "
          f"{isinstance(e, hvd.HvliteError)}: {e}", flush=True)
