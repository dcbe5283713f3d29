"""hvlite.ps under mpiexec: modes against all-reduce training, the staleness bound, draining,
failures that end every rank, and the digits example in each mode."""
import pytest

from hvlite.errors import ConfigError
from hvlite.ps import check_settings


@pytest.mark.parametrize("n", [2, 3])
def test_ps(mpirun, n):
    mpirun(n, "tests/mpi/mpi_ps.py", timeout=120)


@pytest.mark.parametrize("how, words", [
    ("worker", ["worker rank 1 failed: ValueError: bad batch on purpose"]),
    ("server", ["server rank 3 failed: FloatingPointError: optimizer blew up at step 3"]),
    ("server-exit", []),
])
def test_a_failing_rank_ends_every_rank(mpirun, how, words):
    with pytest.raises(pytest.fail.Exception) as info:
        mpirun(4, "tests/mpi/ps_fail.py", how, pytest_module=False, timeout=60)
    out = str(info.value)
    assert "exited" in out and "hung" not in out, out     # it failed, and not by the timeout
    assert "finished normally" not in out, out
    for w in words:
        # the failing rank and every other rank print it (workers from the server's message)
        assert out.count(w) >= 3, out


def test_bad_settings_are_named():
    with pytest.raises(ConfigError, match="unknown mode 'bsp'"):
        check_settings("bsp", None, 1, 4)
    with pytest.raises(ConfigError, match="staleness must be an integer >= 0, got -1"):
        check_settings("ssp", -1, 1, 4)
    with pytest.raises(ConfigError, match="needs staleness"):
        check_settings("ssp", None, 1, 4)
    with pytest.raises(ConfigError, match="applies to mode='ssp' only"):
        check_settings("async", 2, 1, 4)
    with pytest.raises(ConfigError, match="4 server\\(s\\) on 4 rank\\(s\\) leaves no worker"):
        check_settings("sync", None, 4, 4)
    with pytest.raises(ConfigError, match="servers must be a positive integer"):
        check_settings("sync", None, 0, 4)
