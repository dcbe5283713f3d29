"""Process sets under mpiexec: subsets with ranks outside them, concurrent sets, removal,
static sets, errors (tests/mpi_process_sets.py)."""
import pytest

from conftest import run_mpi


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


@pytest.mark.parametrize("case", ["add", "doc-as-was"])
def test_a_rank_that_fails_instead_of_registering_fails_the_others(case):
    """tests/psets_failure.py: the ranks still in add_process_set / remove_process_set end with
    a ShutdownError naming the ranks that left, as around an ordinary collective."""
    with pytest.raises(pytest.fail.Exception) as info:
        run_mpi(4, "tests/psets_failure.py", case, pytest_module=False, timeout=90,
                env={"HVLITE_DYNAMIC_PROCESS_SETS": "1"})
    out = str(info.value)
    assert "hung" not in out, out[-3000:]
    waiting = (0, 2, 3) if case == "add" else (0, 2)
    for r in waiting:
        assert f"rank {r}: ShutdownError: hvlite was shut down (shutdown() on rank 1" in out, \
            out[-3000:]


def test_the_guide_snippet_runs_as_printed():
    out = run_mpi(4, "tests/psets_failure.py", "doc", pytest_module=False, timeout=90,
                  env={"HVLITE_DYNAMIC_PROCESS_SETS": "1"})
    assert all(f"rank {r}: done" in out for r in range(4)), out[-3000:]


@pytest.mark.parametrize("n", [3, 4])
def test_sets_from_communicators(mpirun, n):
    """ProcessSet(comm) as in Horovod: one set per distinct group of the ranks' communicators."""
    out = mpirun(n, "tests/psets_from_comms.py", pytest_module=False, timeout=90)
    for r in range(n):
        assert f"rank {r}: sets from communicators ok" in out, out
