"""alltoall's counts are checked where they could overflow: splits in Python with integers that
cannot wrap, and every count again in the core (a negative one or a byte count past INT_MAX),
with every rank stopping together, and the runtime right afterwards."""
import pytest

from conftest import run_mpi


@pytest.mark.parametrize("env", [{}, {"HVLITE_SHM": "0"}], ids=["segment", "mpi"])
def test_alltoall_counts_that_wrap_or_are_negative_fail_on_every_rank(env):
    out = run_mpi(3, "tests/mpi_alltoall_bounds.py", pytest_module=False, timeout=120, env=env)
    for r in range(3):
        assert out.count(f"rank {r}: core refused") == 4, out
        assert f"rank {r}: alltoall after the refusals is right" in out, out
        assert f"rank {r}: splits summing below the first dimension send those rows" in out, out
        assert f"rank {r}: no error" not in out, out
    assert out.count("rank 1: refused splits") == 2, out
    assert out.count("peer refused") == 4, out
