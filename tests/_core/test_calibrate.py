"""auto's measured picks under mpiexec (tuning/calibrate.pyx): at 1..4 ranks, turned off, and what
HVLITE_LOG_LEVEL=debug prints."""
import json

import pytest


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_calibration(mpirun, n):
    mpirun(n, "tests/_core/mpi_calibrate.py", timeout=240)


def test_calibration_off_leaves_auto_to_the_model(mpirun):
    mpirun(3, "tests/_core/mpi_calibrate.py", env={"HVLITE_CALIBRATE": "0"}, timeout=240)


def test_a_model_that_leaves_one_candidate_is_still_checked_on_one_node(mpirun):
    """A cost model whose figures put one algorithm far ahead (here pinned: point-to-point
    messages 1 ms, the shared segment's barrier 0.1 us; a probe that met a busy moment does the
    same) leaves shm the only candidate within 2.5x. On one node its runner-up is tried too, so
    a wrong model cannot keep shm for good (it ran 3.6x slower than ring in such a launch)."""
    mpirun(2, "tests/_core/mpi_calibrate.py", "-k", "each_class",
           env={"HVLITE_PROBE": "0", "HVLITE_ALPHA_INTRA": "1e-3", "HVLITE_BETA_INTRA": "1e-7",
                "HVLITE_ALPHA_SHM": "1e-7"}, timeout=240)


@pytest.mark.parametrize("n", [2, 3])
def test_a_copy_that_rides_with_the_vote_counts_in_shm_time(mpirun, n):
    """The model pinned as above, so that small all-reduces go through the shared segment and
    their data ride with the vote during auto's trials (mpi_calibrate.py says what is checked)."""
    mpirun(n, "tests/_core/mpi_calibrate.py", "-k", "rides_with_the_vote",
           env={"HVLITE_PROBE": "0", "HVLITE_ALPHA_INTRA": "1e-3", "HVLITE_BETA_INTRA": "1e-7",
                "HVLITE_ALPHA_SHM": "1e-7"}, timeout=240)


def test_debug_names_what_was_measured(mpirun):
    """Rank 0 prints one line per measurement of a class's candidates, naming the pick the
    table holds. The cost model is pinned (not probed) to figures that put every algorithm
    within 2.5x of the best at 2 ranks, so classes are measured on any machine; a probed model
    may leave a class one candidate, which is taken without trials and prints nothing."""
    out = mpirun(2, "tests/_core/mpi_calibrate.py", "-s", "-k", "each_class",
                 env={"HVLITE_LOG_LEVEL": "debug", "HVLITE_PROBE": "0"}, timeout=240)
    lines = [line for line in out.splitlines() if "auto measured at" in line]
    tables = [line.split("calibration table: ", 1)[1] for line in out.splitlines()
              if line.startswith("[0] calibration table: ")]
    assert len(tables) == 1, out[-2000:]
    table = json.JSONDecoder().raw_decode(tables[0])[0]      # pytest's progress may follow
    measured = {int(cls): entry for cls, entry in table.items()
                if entry["seconds"]}
    assert measured, f"no class measured with the pinned model: {tables[0]}"
    assert all(line.startswith("[0] ") for line in lines), lines      # rank 0 only
    assert all(" -> " in line and " us" in line for line in lines), lines
    # one line per measured class, at the size it measured, naming the pick the table holds
    # (a class the job's calls did not confirm is measured again: 1 + redos lines, the last one
    # naming the pick, each redo announced on its own line)
    # (a runner-up that ran faster in the job's calls took over: one line each, "... from now")
    said = {}
    for line in out.splitlines():
        if "auto measured at" in line:
            said[int(line.split("measured at ")[1].split()[0])] = line.rsplit(" -> ", 1)[1].strip()
        elif line.startswith("[0] hvlite: auto at ") and line.endswith(" from now"):
            said[int(line.split("auto at ")[1].split()[0])] = line.rsplit(": ", 1)[1].split()[0]
    again = [line for line in out.splitlines() if "measuring again" in line and "auto's" in line]
    took = [line for line in out.splitlines() if line.startswith("[0] hvlite: auto at ")
            and line.endswith(" from now")]
    redos = sum(e["redos"] for e in measured.values())
    assert len(lines) == len(measured) + redos and len(again) == redos, (lines, again, measured)
    assert len(took) == sum(e["switches"] for e in measured.values()), (took, measured)
    assert said == {e["at_bytes"]: e["pick"] for e in measured.values()}, (lines, measured)
