"""hvliterun when ranks fail: the per-rank supervisor (hvlite/run/rank.py), the failure summary,
and what is left afterwards (processes of the job, files in /dev/shm).

Real jobs: one rank SIGKILLs itself mid-stream of allreduces (first and last rank, N = 2 and 3),
raises ValueError("boom"), or calls os._exit(3); a parameter-server job's server is SIGKILLed.
Each must end within seconds with a summary naming the rank, its host and how it ended, leave no
process (found by a unique marker in argv) and no new MPI or hvlite file in /dev/shm. The rule
for the first error line, the summary's text, the wrapper alone and the /dev/shm clean-up are
tested in-process or without MPI."""
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

from conftest import run_bounded
from hvlite.run import cleanup, launcher, rank, summary

HVLITERUN = [sys.executable, "-m", "hvlite.run"]
FAULTY = str(pathlib.Path(__file__).with_name("faulty.py"))
WRAPPER = launcher.RANK_WRAPPER
HOST = socket.gethostname()
BOUND = 45          # seconds a failed job may take to end from its launch, start-up, summary and
                    # clean-up included (a hang guard: a loaded 2-core machine needs a margin)


def _processes_with(marker):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[-1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in argv and state != b"Z":
            found.append((int(pid), b" ".join(argv).decode(errors="replace")))
    return found


def launch(argv, timeout=60, env=None):
    """Run hvliterun with `argv`; on a timeout kill its whole process group and fail, showing
    the output. Returns (returncode, stdout, stderr, seconds)."""
    return run_bounded(HVLITERUN + argv, timeout, f"hvliterun {argv}",
                       env=dict(os.environ, **(env or {})), cwd=None, merge_stderr=False)


def failing_job(tmp_path, n, how, victim, servers=None):
    """Run faulty.py on n ranks; check the job ended in time and left nothing behind: no process
    with its marker in argv, none of the /dev/shm files its ranks mapped (MPICH's, UCX's), no
    segment of hvlite's named after one of its ranks."""
    marker = f"hvlite-test-{uuid.uuid4().hex[:12]}"
    extra = ["--servers", str(servers)] if servers else []
    rc, out, err, took = launch(["-np", str(n)] + extra +
                                [sys.executable, FAULTY, how, str(victim), marker],
                                env={"FAULTY_REPORT_DIR": str(tmp_path)})
    shown = f"exit status {rc} after {took:.1f}s\nstdout:\n{out}\nstderr:\n{err}"
    assert rc != 0, shown
    assert took < BOUND, shown
    assert "finished normally" not in out, shown
    deadline = time.monotonic() + 1.0
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _processes_with(marker), f"{_processes_with(marker)} left\n{shown}"
    reports = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert len(reports) == n, f"{len(reports)} of {n} ranks reported\n{shown}"
    mapped = {path for r in reports for path in r["shm"]}
    assert any("mpich_shm_" in path for path in mapped), mapped          # what a kill leaves
    left = [path for path in mapped if os.path.exists(path)]
    left += [name for name in os.listdir("/dev/shm")
             for r in reports if name.startswith(f"hvlite-{r['pid']}-")]
    assert not left, f"{left} left in /dev/shm\n{shown}"
    return rc, err, shown


def summary_lines(err):
    start = err.index("hvliterun: ")
    return err[start:].splitlines()


@pytest.mark.parametrize("n,victim", [(2, 0), (2, 1), (3, 0), (3, 2)])
def test_sigkilled_rank_is_named(tmp_path, n, victim):
    rc, err, shown = failing_job(tmp_path, n, "kill", victim)
    lines = summary_lines(err)
    ranked = [line for line in lines if line.startswith(f"  rank {victim} on {HOST}: ")]
    assert ranked and "killed by SIGKILL" in ranked[0] and "<- first to fail" in ranked[0], shown
    assert f"root cause (first to fail): rank {victim} on {HOST}, SIGKILL" in err, shown
    others = [r for r in range(n) if r != victim]
    for r in others:        # hydra SIGKILLs the survivors before they can say anything
        assert f"  rank {r} on {HOST}: killed by mpiexec after rank {victim} failed" in err, shown


def test_exception_shows_its_first_error_line(tmp_path):
    rc, err, shown = failing_job(tmp_path, 3, "raise", 1)
    assert rc == 1, shown
    line = next(x for x in summary_lines(err) if x.startswith(f"  rank 1 on {HOST}: "))
    assert "exit code 1" in line and line.endswith("ValueError: boom   <- first to fail"), shown
    assert f"root cause (first to fail): rank 1 on {HOST}, exit code 1: ValueError: boom" in err
    # the other ranks failed too, after it, with hvlite's message
    assert err.count("ShutdownError") >= 2, shown


def test_exit_code_is_named(tmp_path):
    rc, err, shown = failing_job(tmp_path, 2, "exit", 1)
    # hydra's own status is 3 or 9 (a rank it killed), with or without the supervisor, as its
    # proxy happens to reap; the summary says what happened
    assert rc in (3, 9), shown
    assert f"root cause (first to fail): rank 1 on {HOST}, exit code 3" in err, shown


def test_exit_0_without_shutdown_fails_the_job(tmp_path):
    """os._exit(0) while hvlite runs: hydra alone would end the job with status 0 and no word;
    hvlite's state file tells the supervisor, which makes it a failure that names the rank."""
    rc, err, shown = failing_job(tmp_path, 3, "exit0", 2)
    assert f"root cause (first to fail): rank 2 on {HOST}, exit code 1: exited with status 0 " \
           "while hvlite was running in it" in err, shown


def test_parameter_server_killed_server_is_named(tmp_path):
    rc, err, shown = failing_job(tmp_path, 3, "ps-kill", 2, servers=1)
    assert f"root cause (first to fail): rank 2 on {HOST}, SIGKILL" in err, shown


def test_ranks_print_and_run_through_the_supervisor(tmp_path):
    code = ("import hvlite as hvd, sys; hvd.init(); sys.stdout.write(f'{hvd.rank()} {hvd.size()}\\n'); "
            "sys.stderr.write(f'err{hvd.rank()}\\n')")
    rc, out, err, _ = launch(["-np", "3", sys.executable, "-c", code])
    assert rc == 0, err
    assert sorted(out.split()) == sorted("0 3 1 3 2 3".split()), out
    assert all(f"err{r}\n" in err for r in range(3)) and "FAILED" not in err, err


def test_no_supervise_runs_the_command_directly():
    args = launcher.parse_args(["-np", "2", "--no-supervise", "python", "x.py"])
    assert args.supervise is False
    cmd = launcher.build_command(args, "/x/mpiexec", "mpich", {"A": "1"})
    assert cmd[-2:] == ["python", "x.py"] and WRAPPER not in cmd and cmd[3:6] == ["-genv", "A", "1"]
    wrapped = launcher.build_command(args, "/x/mpiexec", "mpich", {}, (sys.executable, WRAPPER))
    assert wrapped[-4:] == [sys.executable, WRAPPER, "python", "x.py"]
    rc, out, err, _ = launch(["-np", "2", "--no-supervise", sys.executable, "-c",
                              "import sys; print('direct'); sys.exit(4)"])
    assert rc == 4 and out.count("direct") == 2 and "FAILED" not in err, err


# -- the wrapper alone (no MPI) -----------------------------------------------------------------

def run_wrapper(tmp_path, code, **kw):
    env = dict(os.environ, **{rank.STATUS_DIR_ENV: str(tmp_path), "PMI_RANK": "5"})
    proc = subprocess.run([sys.executable, WRAPPER, sys.executable, "-c", code], env=env,
                          capture_output=True, timeout=30, **kw)
    rec = json.loads((tmp_path / "rank-5.json").read_text())
    return proc, rec


def test_wrapper_passes_output_and_status_through(tmp_path):
    code = ("import sys; sys.stdout.write('out\\n'); sys.stderr.write('partial'); sys.stderr.flush(); "
            "sys.stderr.write(' line\\nRuntimeError: first\\nKeyError: second\\n'); sys.exit(7)")
    proc, rec = run_wrapper(tmp_path, code)
    assert proc.returncode == 7
    assert proc.stdout == b"out\n"
    assert proc.stderr == b"partial line\nRuntimeError: first\nKeyError: second\n"
    assert rec["rank"] == 5 and rec["exit_code"] == 7 and rec["signal"] is None
    assert rec["state"] == "exited" and rec["first_error"] == "RuntimeError: first"
    assert rec["host"] == HOST and rec["pid"] and rec["wall_time"] >= 0
    assert not [p for p in tmp_path.iterdir() if p.suffix != ".json"]      # no temporary file


def test_wrapper_dies_of_the_childs_signal(tmp_path):
    proc, rec = run_wrapper(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert proc.returncode == -signal.SIGTERM
    assert rec["signal"] == "SIGTERM" and rec["exit_code"] is None


def test_wrapper_forwards_signals(tmp_path):
    env = dict(os.environ, **{rank.STATUS_DIR_ENV: str(tmp_path), "PMI_RANK": "0"})
    code = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(9)); "
            "print('ready', flush=True); time.sleep(30)")
    proc = subprocess.Popen([sys.executable, WRAPPER, sys.executable, "-c", code], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 9
    finally:
        if proc.poll() is None:
            proc.kill()
    assert json.loads((tmp_path / "rank-0.json").read_text())["exit_code"] == 9


# -- the first error line and the summary, in-process --------------------------------------------

def test_first_error_line_rule():
    tb = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
          "    raise ValueError('boom')\nValueError: boom\n")
    assert rank.first_error_line("starting\n" + tb) == "ValueError: boom"
    # a traceback's line wins over an earlier line that only looks like an error ...
    assert rank.first_error_line("warning: no error: here\n" + tb) == "ValueError: boom"
    # ... and the first traceback wins over later ones (chained or not)
    chained = tb + "\nDuring handling of the above exception, another exception occurred:\n\n" + \
        tb.replace("ValueError: boom", "KeyError: 'k'")
    assert rank.first_error_line(chained) == "ValueError: boom"
    assert rank.first_error_line("ok\nerror: cannot open file\nERROR later\n") == "error: cannot open file"
    assert rank.first_error_line("Fatal error in PMPI_Allreduce: Other MPI error\n") == \
        "Fatal error in PMPI_Allreduce: Other MPI error"
    assert rank.first_error_line("hvlite.errors.MPIError: lost\n") == "hvlite.errors.MPIError: lost"
    assert rank.first_error_line("all fine\nno errors found\n") is None
    # a script that is not there, a command that is not there: the OS's words are the error
    missing = "/venv/bin/python: can't open file '/w/train.py': [Errno 2] No such file or directory\n"
    assert rank.first_error_line(missing) == missing.strip()
    assert rank.first_error_line("sh: 1: trian.py: command not found\n") == "sh: 1: trian.py: command not found"
    assert rank.first_error_line("x" * 2000 + "Error: long")[:10] == "x" * 10
    assert len(rank.first_error_line("x" * 2000 + "Error: long")) == rank.MAX_LINE


def _rec(r, state="exited", code=None, sig=None, err=None, t=None, end=None, host="h"):
    return {"rank": r, "host": host, "pid": 100 + r, "state": state, "exit_code": code,
            "signal": sig, "first_error": err, "error_time": t, "end_time": end,
            "wall_time": None if end is None else end - 90}


def test_summary_names_the_first_failure():
    records = [_rec(0, "running"),
               _rec(1, sig="SIGKILL", end=100.0),
               _rec(2, code=1, err="hvlite.errors.MPIError: peer gone", t=100.5, end=101.0),
               _rec(3, code=0, end=102.0)]
    text = summary.format_summary(records, 9, ["python", "train.py"], size=5)
    lines = text.splitlines()
    assert lines[1] == "hvliterun: python train.py FAILED (exit status 9)"
    body = [x for x in lines if x.startswith("  ")]
    assert body[0] == "  rank 1 on h: killed by SIGKILL (pid 101, after 10.0 s)   <- first to fail"
    assert body[1] == "  rank 0 on h: killed by mpiexec after rank 1 failed"
    assert body[2] == ("  rank 2 on h: exit code 1 (pid 102, after 11.0 s): "
                       "hvlite.errors.MPIError: peer gone")
    assert body[3].startswith("  rank 4: no record")
    assert body[4] == "  (1 other rank exited 0)"
    assert "root cause (first to fail): rank 1 on h, SIGKILL" in text


def test_summary_root_cause_by_first_error_time():
    # rank 2 printed its error first but was killed by mpiexec; rank 0 exited later
    records = [_rec(0, code=1, err="PSError: worker rank 2 failed", t=50.0, end=51.0),
               _rec(2, "running", err="ValueError: boom", t=49.0)]
    text = summary.format_summary(records, 1, ["python", "ps.py"], size=3)
    assert "  rank 2 on h: killed by mpiexec (no exit record): ValueError: boom   <- first to fail" in text
    assert "root cause (first to fail): rank 2 on h, killed by mpiexec after its error: " \
        "ValueError: boom" in text
    assert "  rank 1: no record" in text
    # the job was stopped by a signal to hvliterun: that is the cause
    text = summary.format_summary(records, 1, ["python", "-c", "\nimport x\n"], size=3,
                                  signal_name="SIGTERM")
    assert "hvliterun: python -c import x FAILED (exit status 1)" in text
    assert "root cause: hvliterun received SIGTERM and passed it to the job (first to end: " \
        "rank 2 on h" in text


def test_summary_blames_the_rank_an_error_names():
    """The supervisors read lines when they are scheduled: on a busy machine the ShutdownError
    that rank 1's exit caused on rank 0 can be read before rank 1's own traceback. An error
    naming its cause hands the blame on (and never round in a circle)."""
    records = [_rec(0, code=1, t=10.0, end=10.5, err="hvlite.errors.ShutdownError: hvlite was "
                    "shut down (shutdown() on rank 1) before this collective completed"),
               _rec(1, code=1, t=10.2, end=10.5, err="RuntimeError: rank 1 fails on purpose"),
               _rec(2, code=1, t=10.1, end=10.5, err="hvlite.errors.LostRankError: rank 1 is "
                    "lost: it has not answered for 5 s")]
    assert summary.root_cause(records)["rank"] == 1
    records[1] = _rec(1, code=1, t=10.2, end=10.5, err="RankFailedError: rank 2 failed while "
                      "this rank waited in allreduce 'x'")
    records[2] = _rec(2, code=1, t=10.3, end=10.5, err="ShutdownError: hvlite was shut down "
                      "(shutdown() on rank 0) before this collective completed")
    assert summary.root_cause(records)["rank"] == 0       # 0 -> 1 -> 2 -> 0: stop where it began
    records[0] = _rec(0, code=1, t=10.0, end=10.5, err="ShutdownError: hvlite was shut down "
                      "(shutdown() on rank 7) before this collective completed")
    assert summary.root_cause(records)["rank"] == 0       # rank 7 has no failed record


def test_summary_only_for_failed_jobs(tmp_path):
    ok = [_rec(0, code=0, end=1.0), _rec(1, code=0, end=1.0)]
    assert summary.format_summary(ok, 0) is None
    assert not summary.job_failed(ok, 0)
    assert summary.job_failed(ok + [_rec(2, code=2, end=1.0)], 0)
    text = summary.format_summary([], 5, ["a"])
    assert "root cause: unknown" in text
    # mpiexec said 0 but a record says a rank failed: hvliterun exits 1
    for rec in ok + [_rec(2, code=2, end=1.0)]:
        (tmp_path / f"rank-{rec['rank']}.json").write_text(json.dumps(rec))
    (tmp_path / "rank-9.json.tmp-1").write_text("{partial")          # ignored
    args = launcher.parse_args(["-np", "3", "python", "x.py"])
    assert launcher._after(args, 0, {cleanup.JOB_ENV: "none"}, str(tmp_path), None, []) == 1


def test_shm_clean_up_is_conservative(tmp_path):
    (tmp_path / "mpich_shm_old_0").write_text("x")
    before = cleanup.shm_listing(str(tmp_path))
    for name in ("mpich_shm_1a2b_0", "mpich_vci_1a2b_0", "hvlite-123-4", "ucx_shm_posix_9f",
                 "someone_elses", "mpich_shm_held_0"):
        (tmp_path / name).write_text("x")
    (tmp_path / "mpich_shm_dir_0").mkdir()
    held = open(tmp_path / "mpich_shm_held_0")          # in use: kept
    try:
        removed = cleanup.clean_shm(before, str(tmp_path), wait=0.2)
    finally:
        held.close()
    assert sorted(os.path.basename(p) for p in removed) == [
        "hvlite-123-4", "mpich_shm_1a2b_0", "mpich_vci_1a2b_0", "ucx_shm_posix_9f"]
    assert sorted(os.listdir(tmp_path)) == ["mpich_shm_dir_0", "mpich_shm_held_0",
                                            "mpich_shm_old_0", "someone_elses"]
    assert cleanup.clean_shm(None, str(tmp_path)) == []
