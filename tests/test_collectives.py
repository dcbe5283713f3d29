"""The public collectives' argument checks and error paths at several rank counts, under mpiexec
(tests/mpi_errors.py)."""
import pytest


@pytest.mark.parametrize("n", [1, 2, 3])
def test_errors(mpirun, n):
    mpirun(n, "tests/mpi_errors.py")


@pytest.mark.parametrize("n", [2, 3, 5])
def test_handle_order_and_zero_size_shapes(mpirun, n):
    mpirun(n, "tests/mpi_collectives.py", timeout=180)
