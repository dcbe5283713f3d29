"""Horovod's duplicate-name rule under mpiexec (tests/mpi_duplicate_names.py): a name in flight
on a rank, its handle held or dropped, is refused at once while the peers wait in a barrier."""
import pytest


@pytest.mark.parametrize("n", [2, 3])
def test_duplicate_names(mpirun, n):
    mpirun(n, "tests/mpi_duplicate_names.py", timeout=120)
