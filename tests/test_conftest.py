"""The launcher every multi-rank test goes through (conftest.run_mpi)."""
import pytest


def test_harness_reports_a_hang(mpirun):
    """A rank that never returns fails the test within its timeout, with every rank's output."""
    with pytest.raises(pytest.fail.Exception) as info:
        mpirun(2, "tests/hang.py", timeout=20, pytest_module=False)
    assert "hung" in str(info.value) and "[1]" in str(info.value) and "rank 1 waiting" in str(info.value)
