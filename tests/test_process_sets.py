"""Process sets under mpiexec: subsets with ranks outside them, concurrent sets, removal,
static sets, errors (tests/mpi_process_sets.py)."""
import pytest


@pytest.mark.parametrize("n", [2, 3, 5])
def test_process_sets(mpirun, n):
    mpirun(n, "tests/mpi_process_sets.py", env={"HVLITE_DYNAMIC_PROCESS_SETS": "1"},
           timeout=180)


def test_horovod_alias_enables_dynamic_sets(mpirun):
    mpirun(2, "tests/mpi_process_sets.py", "-k", "objects or remove",
           env={"HOROVOD_DYNAMIC_PROCESS_SETS": "1"}, timeout=120)


def test_process_sets_need_thread_multiple(mpirun):
    out = mpirun(2, "tests/psets_serialized.py", pytest_module=False, timeout=60,
                 env={"HVLITE_MPI_THREAD_LEVEL": "serialized"})
    assert out.count("REFUSED") == 2, out
