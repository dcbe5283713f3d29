"""The background coordinator under mpiexec: correctness at N = 1..5, fusion and cache settings
that must not change any result, stalls, and the idle-CPU promise."""
import re

import pytest

VARIANTS = {
    "default": {},
    "fusion-off": {"HVLITE_FUSION_THRESHOLD": "0"},
    "threshold-below-one-tensor": {"HVLITE_FUSION_THRESHOLD": "16"},
    "cache-off": {"HVLITE_CACHE_CAPACITY": "0"},
    "tiny-cache": {"HVLITE_CACHE_CAPACITY": "3"},
}


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_coordinator(mpirun, n):
    mpirun(n, "tests/_core/mpi_coordinator.py", timeout=240)


def _digest(out):
    found = re.findall(r"DIGEST ([0-9a-f]{40})", out)
    assert found, out
    return found[0]


def test_fusion_and_cache_settings_give_identical_results(mpirun):
    digests = {name: _digest(mpirun(3, "tests/_core/mpi_coordinator.py", "-s", env=env, timeout=240))
               for name, env in VARIANTS.items()}
    assert len(set(digests.values())) == 1, digests


def test_stall_check_and_shutdown(mpirun):
    out = mpirun(2, "tests/_core/mpi_stall.py", "-s", timeout=120,
                 env={"HVLITE_STALL_CHECK_TIME_SECONDS": "1",
                      "HVLITE_STALL_SHUTDOWN_TIME_SECONDS": "3"})
    assert "hvlite: stall:" in out and "ranks that have not submitted it" in out


def test_stall_reports_escape_and_cut_odd_names(mpirun):
    out = mpirun(2, "tests/_core/mpi_stall.py", "-s", timeout=120,
                 env={"HVLITE_STALL_CHECK_TIME_SECONDS": "1", "STALL_ODD_NAME": "1",
                      "HVLITE_STALL_SHUTDOWN_TIME_SECONDS": "3"})
    reports = [ln for ln in out.splitlines() if "hvlite: stall:" in ln]
    assert reports and all("\\x00tail\\x0a" in ln and " bytes)" in ln for ln in reports), \
        out[-3000:]
    assert all(len(ln) < 2000 for ln in reports), max(map(len, reports))
