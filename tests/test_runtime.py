"""init / shutdown / re-init, topology and thread levels under mpiexec (tests/mpi_runtime.py)."""
import pytest


@pytest.mark.parametrize("n,env", [(1, {}), (3, {}), (4, {"HVLITE_LOCAL_SIZE": "3"}),
                                   (2, {"HVLITE_MPI_THREAD_LEVEL": "serialized"})])
def test_runtime(mpirun, n, env):
    mpirun(n, "tests/mpi_runtime.py", env=env)
