"""hvlite.compression under mpiexec: see tests/compression/mpi_compression.py."""
import pytest


@pytest.mark.parametrize("n", [2, 3])
def test_compression(mpirun, n):
    mpirun(n, "tests/compression/mpi_compression.py", timeout=180)
