"""The public collectives' argument checks and error paths at several rank counts, under mpiexec
(tests/mpi_errors.py)."""
import pytest


@pytest.mark.parametrize("n", [1, 2, 3])
def test_errors(mpirun, n):
    mpirun(n, "tests/mpi_errors.py")
