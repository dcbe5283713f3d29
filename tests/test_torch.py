"""hvlite.torch (Horovod's torch surface) under mpiexec at 2 and 3 ranks."""
import pytest


@pytest.mark.parametrize("n", [2, 3])
def test_torch_collectives(mpirun, n):
    pytest.importorskip("torch")
    mpirun(n, "tests/mpi/mpi_torch_ops.py", timeout=240)


@pytest.mark.parametrize("n", [2, 3])
def test_torch_training(mpirun, n):
    pytest.importorskip("torch")
    mpirun(n, "tests/mpi/mpi_torch_train.py", timeout=240)
