"""hvlite.optim under mpiexec: distributed training equals one process on the global batch."""
import pytest


@pytest.mark.parametrize("n", [1, 2, 3])
def test_optim(mpirun, n):
    mpirun(n, "tests/optim/mpi_optim.py")


def test_digits_example_trains(mpirun, tmp_path):
    out = mpirun(2, "examples/train_digits.py", "--epochs", "15", "--timeline",
                 str(tmp_path / "t.json"), pytest_module=False, timeout=180)
    acc = float(out.split("test accuracy ")[1].split("%")[0])
    assert acc >= 95.0 and "identical on every rank: True" in out
    assert (tmp_path / "t.json").exists()


def test_digits_example_trains_with_adasum(mpirun):
    out = mpirun(2, "examples/train_digits.py", "--epochs", "15", "--op", "adasum",
                 pytest_module=False, timeout=180)
    acc = float(out.split("test accuracy ")[1].split("%")[0])
    assert acc >= 95.0 and "op adasum" in out and "identical on every rank: True" in out
