"""auto's measured picks under mpiexec (calibrate.pyx): at 1..4 ranks, turned off, and what
HVLITE_LOG_LEVEL=debug prints."""
import pytest


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_calibration(mpirun, n):
    mpirun(n, "tests/_core/mpi_calibrate.py", timeout=240)


def test_calibration_off_leaves_auto_to_the_model(mpirun):
    mpirun(3, "tests/_core/mpi_calibrate.py", env={"HVLITE_CALIBRATE": "0"}, timeout=240)


def test_debug_names_what_was_measured(mpirun):
    out = mpirun(2, "tests/_core/mpi_calibrate.py", "-s", "-k", "each_class",
                 env={"HVLITE_LOG_LEVEL": "debug"}, timeout=240)
    lines = [line for line in out.splitlines() if "auto measured at" in line]
    assert lines, out[-2000:]
    assert all(" -> " in line and " us" in line for line in lines), lines
    # rank 0 only: one line per measured class
    sizes = [line.split("measured at ")[1].split()[0] for line in lines]
    assert len(sizes) == len(set(sizes)), lines
