"""PR_SET_PTRACER is least privilege: only while a set uses cross-memory attach, only where
Yama's scope 1 needs it, never with HVLITE_SHM_PTRACER=0, and undone at shutdown."""
import pytest

from conftest import run_mpi


@pytest.mark.parametrize("allowed", ["1", "0"])
def test_ptracer_is_held_while_used_and_released(allowed):
    out = run_mpi(3, "tests/_core/mpi_ptracer.py", pytest_module=False, timeout=120,
                  env={"HVLITE_SHM_PTRACER": allowed, "HVLITE_SHM_DIRECT": "1"})
    assert out.count("released") == 3, out
