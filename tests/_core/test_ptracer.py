"""PR_SET_PTRACER is least privilege: only while a set uses cross-memory attach, only where
Yama's scope 1 needs it, never with HVLITE_SHM_PTRACER=0, and undone at shutdown."""
import pytest

from conftest import run_mpi


@pytest.mark.parametrize("n,allowed,scope", [(3, "1", None), (3, "0", None), (2, "1", "1"),
                                             (3, "1", "1"), (2, "0", "1"), (2, "1", "0")])
def test_ptracer_is_held_while_used_and_released(n, allowed, scope):
    """scope: Yama's scope as the core assumes it (None: as read; this machine may have no
    Yama, where the prctl then fails and only what was asked for can be checked)."""
    env = {"HVLITE_SHM_PTRACER": allowed, "HVLITE_SHM_DIRECT": "1"}
    if scope is not None:
        env["HVLITE_TEST_YAMA_SCOPE"] = scope
    out = run_mpi(n, "tests/_core/mpi_ptracer.py", pytest_module=False, timeout=120, env=env)
    assert out.count("released") == n, out
