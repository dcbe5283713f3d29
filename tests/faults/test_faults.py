"""Faults that involve several ranks, under mpiexec at N = 2 and 3: settings that differ between
ranks (set on the last rank only, through mpiexec's per-rank -env), a bad setting on one rank,
and argument errors on one rank. Every rank must see the error, naming the setting or the rank,
and the job must end within seconds, not hang."""
import json
import re
import time

import pytest

BOUND = 30      # seconds: generous for a loaded 2-core machine; a hang would take the timeout

# name: (environment of the last rank only, error every rank must raise, message fragments)
INIT_CASES = {
    "segment-bytes": ({"HVLITE_SEGMENT_BYTES": "4096"}, "ConfigError",
                      ["HVLITE_SEGMENT_BYTES", "rank 0: 262144", "rank {last}: 4096"]),
    "cache-capacity": ({"HVLITE_CACHE_CAPACITY": "0"}, "ConfigError",
                       ["HVLITE_CACHE_CAPACITY", "rank 0: 1024", "rank {last}: 0"]),
    "horovod-alias": ({"HOROVOD_FUSION_THRESHOLD": "1024"}, "ConfigError",
                      ["HVLITE_FUSION_THRESHOLD", "rank {last}: 1024"]),
    "algorithm": ({"HVLITE_ALLREDUCE_ALGORITHM": "tree"}, "ConfigError",
                  ["HVLITE_ALLREDUCE_ALGORITHM", "rank {last}: 'tree'"]),
    "thread-level": ({"HVLITE_MPI_THREAD_LEVEL": "serialized"}, "ConfigError",
                     ["HVLITE_MPI_THREAD_LEVEL", "MPI thread level provided"]),
    "bad-value-on-one-rank": ({"HVLITE_CYCLE_TIME": "nan"}, "ConfigError",
                              ["failed on rank(s) [{last}]", "HVLITE_CYCLE_TIME='nan'"]),
    "per-rank-settings-may-differ": ({"HVLITE_LOG_LEVEL": "error", "HVLITE_PS_TIMEOUT": "5",
                                      "HVLITE_TIMELINE_MARK_CYCLES": "1"}, None, []),
}


def _timed(mpirun, n, target, **kw):
    t0 = time.monotonic()
    out = mpirun(n, target, timeout=120, **kw)
    return out, time.monotonic() - t0


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("case", sorted(INIT_CASES))
def test_init_agreement(mpirun, n, case):
    env, error, fragments = INIT_CASES[case]
    expect = json.dumps({"error": error, "fragments": fragments})
    out, took = _timed(mpirun, n, "tests/faults/mpi_init.py", pytest_module=False,
                       env={"HVLITE_TEST_EXPECT": expect}, rank_env={n - 1: env})
    assert out.count("FAULT-CHECK OK") == n, out
    assert took < BOUND, f"{case} at {n} ranks took {took:.1f}s"


@pytest.mark.parametrize("n", [2, 3, 5])
def test_argument_errors_reach_every_rank(mpirun, n):
    out, took = _timed(mpirun, n, "tests/faults/mpi_arguments.py")
    assert "passed" in out and "failed" not in out, out
    assert took < 2 * BOUND, f"argument errors at {n} ranks took {took:.1f}s"


@pytest.mark.parametrize("n", [2, 3])
def test_unknown_variable_is_reported_by_rank_0(mpirun, n):
    expect = json.dumps({"error": None, "fragments": [],
                         "warning": "HVLITE_SEGMENT_BYTE is set but hvlite does not read it; "
                                    "did you mean HVLITE_SEGMENT_BYTES?"})
    out, took = _timed(mpirun, n, "tests/faults/mpi_init.py", pytest_module=False,
                       env={"HVLITE_TEST_EXPECT": expect},
                       rank_env={r: {"HVLITE_SEGMENT_BYTE": "4096"} for r in range(n)})
    assert out.count("FAULT-CHECK OK") == n, out
    assert took < BOUND


@pytest.mark.parametrize("case", ["joined", "fused"])
@pytest.mark.parametrize("n", [2, 3])
def test_one_rank_out_of_memory_fails_every_rank(case, n, tmp_path):
    """tests/faults/oom_job.py: hvlite's own allocation fails on rank 1 alone, inside a round.
    Rank 1 tells its peers why, so every rank raises RankFailedError naming it and the size at
    once, instead of the others waiting for ever in the collective."""
    from conftest import run_mpi
    with pytest.raises(pytest.fail.Exception) as info:
        run_mpi(n, "tests/faults/oom_job.py", case, str(tmp_path), pytest_module=False,
                timeout=90)
    out = str(info.value)
    assert "hung" not in out, out[-3000:]
    # (the fused batch holds whatever of the 200 calls one round took: its size varies)
    what = (r"268435457 bytes for allreduce 'big', a joined rank's contribution," if case == "joined"
            else r"\d+ bytes for allreduce 'g\.\d+' \(fused with \d+ more\)")
    assert re.search(f"rank 1: RankFailedError: out of memory: allocating {what} failed on "
                     "rank 1", out), out[-3000:]
    for r in range(n):
        if r != 1:
            assert (f"rank {r}: RankFailedError: rank 1 failed while this rank waited in "
                    in out), out[-3000:]
