"""Lost ranks and stalls, the fault matrix (tests/faults/mpi_lost.py is the rank side).

Each case is one job: the victim (first or last rank) goes away during a stream of small or of
64 MiB all-reduces, at N = 2, 3, 5. Every case asserts the outcome on every surviving rank that
lived to speak (the error type, the lost rank and the collective named), the seconds from the
victim's departure until each survivor raised and until the whole job had exited, a non-zero
exit status, no process of the job left and no hvlite file left in /dev/shm. `make test` runs a
cross-section; `pytest -m faults_matrix tests/faults` runs the whole matrix."""
import json
import os
import re
import signal
import sys
import time
import uuid

import pytest

from conftest import ROOT, mpiexec_path, run_bounded

LOST_AFTER = 2.0    # HVLITE_LOST_RANK_SECONDS for these jobs
HARD_TIMEOUT = 90   # a job that hangs is killed (with its process group) and the test fails
SIZES = {"small": 1024, "64MiB": 16 << 20}
HOWS = ("sigkill", "exit3", "sigstop", "raise", "return")

# make test's cross-section: every kind of departure, both ends, both sizes, every N
QUICK = {("sigstop", 2, "first", "64MiB"), ("sigstop", 3, "last", "small"),
         ("sigstop", 5, "first", "small"), ("sigkill", 3, "first", "64MiB"),
         ("exit3", 5, "last", "small"), ("raise", 2, "last", "small"),
         ("return", 3, "first", "small")}


def _procs_with(tag):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if tag.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def _hvlite_shm():
    return {f for f in os.listdir("/dev/shm") if f.startswith("hvlite-")} if os.path.isdir("/dev/shm") else set()


def run_job(n, env, tmp_path):
    """Run mpi_lost.py on n ranks; returns (exit status, output, FAULT records, seconds from the
    victim's departure until mpiexec exited). Fails the test, with the output, on a hang."""
    tag = f"faulttag-{uuid.uuid4().hex[:12]}"
    departed = str(tmp_path / "departed")
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", HVLITE_LOST_RANK_SECONDS=str(LOST_AFTER),
                    FAULT_DEPARTED=departed, **env)
    cmd = [mpiexec_path(), "-n", str(n), "-prepend-rank", sys.executable,
           os.path.join(ROOT, "tests/faults/mpi_lost.py"), tag]
    shm_before = _hvlite_shm()
    rc, out, _, _ = run_bounded(cmd, HARD_TIMEOUT, f"job {env} on {n} ranks", env=full_env,
                                on_timeout=lambda: [os.kill(pid, signal.SIGKILL) for pid in _procs_with(tag)])
    ended = time.time()
    left = float(open(departed).read()) if os.path.exists(departed) else None
    records = {}
    for line in out.splitlines():
        m = re.search(r"\[(\d+)\] FAULT (\{.*)$", line)
        if m:
            records[int(m.group(1))] = json.JSONDecoder().raw_decode(m.group(2))[0]
    time.sleep(0.2)
    leftover = _procs_with(tag)
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    assert not leftover, f"processes of the job left after it ended: {leftover}\n{out}"
    new_shm = _hvlite_shm() - shm_before
    assert not new_shm, f"hvlite files left in /dev/shm: {sorted(new_shm)}\n{out}"
    assert left is not None, f"the victim never departed:\n{out}"
    return rc, out, records, ended - left


def check_lost(how, n, end, size, tmp_path, extra_env=None):
    victim = 0 if end == "first" else n - 1
    env = {"FAULT_HOW": how, "FAULT_VICTIM": str(victim), "FAULT_SIZE": str(SIZES[size]),
           **(extra_env or {})}
    rc, out, records, took = run_job(n, env, tmp_path)
    where = f"{how} of rank {victim} at N={n}, {size}"
    assert rc != 0, f"{where}: the job exited 0\n{out}"
    assert took < 20, f"{where}: the job took {took:.1f}s after the rank left\n{out}"
    survivors = [r for r in range(n) if r != victim]
    if how == "sigstop":
        # nothing ends the others but hvlite: every survivor must speak
        for r in survivors:
            rec = records.get(r)
            assert rec, f"{where}: rank {r} said nothing\n{out}"
            assert rec["error"] == "LostRankError", f"{where}: rank {r}: {rec}\n{out}"
            assert f"rank {victim} is lost" in rec["message"], rec
            assert f"{env.get('FAULT_COLLECTIVE', 'allreduce')} 'step." in rec["message"], rec
            assert rec["after"] < LOST_AFTER + 5, f"{where}: rank {r} raised after {rec['after']:.1f}s"
    elif how in ("raise", "return"):
        # the victim's exit shuts hvlite down (atexit): every survivor learns it at once
        for r in survivors:
            rec = records.get(r)
            assert rec, f"{where}: rank {r} said nothing\n{out}"
            assert rec["error"] == "ShutdownError", f"{where}: rank {r}: {rec}\n{out}"
            assert f"on rank {victim}" in rec["message"], rec
            assert rec["after"] < 5, f"{where}: rank {r} raised after {rec['after']:.1f}s"
        if how == "raise":
            # (its traceback's last line, which mpiexec's rank prefixes may cut in pieces)
            assert "ValueError" in out and f"rank {victim} failed before submitting" in out, out
    else:
        # SIGKILL and a non-zero exit: mpiexec ends the job; a survivor that spoke first must
        # have named the rank
        for r, rec in records.items():
            if r != victim and rec["error"] == "LostRankError":
                assert f"rank {victim} is lost" in rec["message"], rec


CASES = [(how, n, end, size) for how in HOWS for n in (2, 3, 5) for end in ("first", "last")
         for size in SIZES]


@pytest.mark.parametrize("how,n,end,size", sorted(QUICK))
def test_lost_rank(how, n, end, size, tmp_path):
    check_lost(how, n, end, size, tmp_path)


def test_only_the_stopped_rank_is_named_when_the_survivors_fall_silent_too(tmp_path):
    """3 ranks, a 64 MiB ring, the last one stopped: the survivors' sends to it hold their MPI's
    shared-memory buffers, so their pings to each other stop getting through as well. The beat
    in the node's segment shows they are alive: each names rank 2 (they named each other)."""
    check_lost("sigstop", 3, "last", "64MiB", tmp_path, {"HVLITE_ALLREDUCE_ALGORITHM": "ring"})


@pytest.mark.parametrize("collective", ["broadcast", "allgather", "reducescatter", "alltoall"])
@pytest.mark.parametrize("how", ["sigstop", "sigkill"])
def test_lost_rank_in_a_copy_through_the_segment(how, collective, tmp_path):
    """Broadcast (below 16 MiB), allgather, reducescatter and alltoall go through the node's
    shared segment (flag barriers, no MPI message): a rank stopped or killed in a stream of
    64 MiB ones (broadcasts of 4 MiB, which stay on the segment) is named by the others."""
    extra = {"FAULT_SIZE": str(1 << 20)} if collective == "broadcast" else {}
    check_lost(how, 3, "last", "64MiB", tmp_path, {"FAULT_COLLECTIVE": collective, **extra})


@pytest.mark.faults_matrix
@pytest.mark.parametrize("how,n,end,size", [c for c in CASES if c not in QUICK])
def test_lost_rank_matrix(how, n, end, size, tmp_path):
    check_lost(how, n, end, size, tmp_path)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_joined_rank_returns_when_the_others_fail(n, tmp_path):
    """After the last rank joins, the others' allgather fails naming it; they then exit without
    joining, and the joined rank's join() raises at once instead of waiting for ever."""
    victim = n - 1
    rc, out, records, took = run_job(n, {"FAULT_HOW": "join", "FAULT_VICTIM": str(victim)}, tmp_path)
    assert rc != 0, out
    for r in range(n - 1):
        rec = records.get(r)
        assert rec and rec["error"] == "MismatchError", f"rank {r}: {rec}\n{out}"
        assert f"rank {victim} joined" in rec["message"] and "after.join" in rec["message"], rec
    rec = records.get(victim)
    assert rec and rec["error"] == "ShutdownError", f"rank {victim}: {rec}\n{out}"
    assert rec["after"] < 5, f"the joined rank raised {rec['after']:.1f}s later"
    assert took < 10, out


@pytest.mark.parametrize("n", [2, 3, 5])
def test_silent_rank_is_named_and_stalls_fail(n, tmp_path):
    """A rank that submits nothing (alive, busy elsewhere) is named by rank 0 within the check
    time + 1 s, and past the shutdown time every waiting rank fails with a StallError naming
    it; the silent rank's own later call says so too."""
    victim = n - 1 if n > 2 else 1
    env = {"FAULT_HOW": "silent", "FAULT_VICTIM": str(victim), "FAULT_SILENT": "6",
           "HVLITE_STALL_CHECK_TIME_SECONDS": "1", "HVLITE_STALL_SHUTDOWN_TIME_SECONDS": "3"}
    rc, out, records, took = run_job(n, env, tmp_path)
    assert rc != 0, out
    reports = [line for line in out.splitlines() if "hvlite: stall:" in line]
    assert reports, f"no stall report:\n{out}"
    first = reports[0]
    assert first.startswith("[0]"), f"stall reports come from rank 0: {first}"
    # the first report comes once the check time has passed and before the shutdown time (how
    # far past the check time depends on when the next round runs on a loaded machine)
    waited = int(first.split("'step.20' has waited ")[1].split(" s")[0]) \
        if "'step.20' has waited " in first else -1
    assert 1 <= waited < 3 and f"have not submitted it: [{victim}]" in first, first
    for r in range(n):
        rec = records.get(r)
        assert rec and rec["error"] == "StallError", f"rank {r}: {rec}\n{out}"
        assert f"[{victim}]" in rec["message"], rec
        if r != victim:
            assert rec["after"] < 3 + 3, f"rank {r} failed {rec['after']:.1f}s after the stall began"
