"""The correctness matrix and error paths at several rank counts, each run under mpiexec."""
import pytest

RANKS = [1, 2, 3, 4, 5, 8]


@pytest.mark.parametrize("n", RANKS)
def test_allreduce_matrix(mpirun, n):
    mpirun(n, "tests/mpi/mpi_allreduce.py", timeout=300)


@pytest.mark.parametrize("n,k", [(4, 2), (5, 2), (5, 3), (8, 3), (8, 2)])
def test_hierarchical_on_pretend_nodes(mpirun, n, k):
    """HVLITE_LOCAL_SIZE=k splits the machine into nodes of k ranks (the last may be smaller)."""
    mpirun(n, "tests/mpi/mpi_allreduce.py", "-k", "not random",
           env={"HVLITE_LOCAL_SIZE": str(k), "HVLITE_TEST_ALGORITHMS": "hierarchical,auto"},
           timeout=300)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_errors(mpirun, n):
    mpirun(n, "tests/mpi/mpi_errors.py")


@pytest.mark.parametrize("n,env", [(1, {}), (3, {}), (4, {"HVLITE_LOCAL_SIZE": "3"}),
                                   (2, {"HVLITE_MPI_THREAD_LEVEL": "serialized"})])
def test_runtime(mpirun, n, env):
    mpirun(n, "tests/mpi/mpi_runtime.py", env=env)


def test_harness_reports_a_hang(mpirun):
    """A rank that never returns fails the test within its timeout, with every rank's output."""
    with pytest.raises(pytest.fail.Exception) as info:
        mpirun(2, "tests/mpi/hang.py", timeout=8, pytest_module=False)
    assert "hung" in str(info.value) and "[1]" in str(info.value) and "rank 1 waiting" in str(info.value)


def _available_gib():
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    return int(info["MemAvailable"].split()[0]) / (1 << 20)


def test_buffers_over_two_to_the_31_elements(mpirun):
    if _available_gib() < 8:
        pytest.skip("needs 8 GiB of free memory (two ranks with a 2 GiB buffer each)")
    mpirun(2, "tests/mpi/mpi_large.py", timeout=400)
