"""hvliterun --elastic (hvlite/run/elastic.py) with examples/train_digits.py --elastic.

Real jobs: rank 1 of 3 SIGKILLs itself (or raises) at step 200 of 660 and the job finishes from
its last commit; a discovery script that offers a third slot mid-run grows the job from 2 ranks
to 3; --max-restarts 0 gives the plain failure. Each run's history (rank 0's --events log: every
restore, commit and applied step) is checked: the restored step is never before the last commit
that returned, the parameters restored are those committed, and the steps that make the final
model are 0, 1, ..., total-1, each once. Longer variants (a host gone from discovery, resuming a
kept --elastic-dir) are marked elastic_long: `pytest -m elastic_long tests/run`.
"""
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from conftest import ROOT, run_bounded
from hvlite.run import elastic, launcher

HVLITERUN = [sys.executable, "-m", "hvlite.run"]
DIGITS = [sys.executable, os.path.join(ROOT, "examples", "train_digits.py"), "--elastic"]
FAULTY = os.path.join(ROOT, "tests", "run", "faulty.py")
HOST = socket.gethostname()
TOTAL = 30 * (1437 // 64)        # train_digits' default: 30 epochs of 22 steps
RECOVERY_BOUND = 60.0            # seconds from a failure to the first step after it, at most


def launch(argv, timeout=240, env=None):
    return run_bounded(HVLITERUN + argv, timeout, f"hvliterun {argv}",
                       env=dict(os.environ, **(env or {})), cwd=None, merge_stderr=False)


def read_events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def check_history(events, total=TOTAL):
    """The checks every elastic run must pass; returns {launch: [steps applied]} and the
    restores, for more specific checks."""
    restores = [e for e in events if e["event"] == "restore"]
    assert [e["launch"] for e in restores] == list(range(len(restores))), restores
    applied = {}
    for e in events:
        if e["event"] == "step":
            applied.setdefault(e["launch"], []).append(e["step"])
    commits = [e for e in events if e["event"] == "commit"]
    effective = []                     # the steps the final model is made of, in order
    for r in restores:
        k = r["launch"]
        before = [c for c in commits if c["launch"] < k]
        if k == 0:
            assert r["step"] == 0 and r["commit"] == 0, r
        else:
            # never back past the last commit that returned before the failure ...
            assert before and r["step"] >= before[-1]["step"], (r, before[-1:])
            # ... nor to a state never committed, and with exactly the committed parameters
            same = [c for c in before if c["step"] == r["step"]]
            if same:
                assert same[-1]["digest"] == r["digest"], (r, same[-1])
            else:    # the commit that raised HostsUpdatedInterrupt logs nothing after it
                assert r["cause"].startswith("hosts added"), r
        steps = applied.get(k, [])
        assert steps == list(range(r["step"], r["step"] + len(steps))), (k, steps[:5])
        del effective[r["step"]:]
        effective += steps
    assert effective == list(range(total)), "a step was skipped or applied twice"
    done = [e for e in events if e["event"] == "done"]
    assert len(done) == 1 and done[0]["step"] == total, done
    return applied, restores, done[0]


def recovery_seconds(events):
    fail = next(e for e in events if e["event"] == "fail")
    first = next(e for e in events if e["event"] == "step" and e["launch"] == 1)
    return first["t"] - fail["t"]


def failing_digits(tmp_path, how, extra=()):
    events = tmp_path / "events.jsonl"
    rc, out, err, took = launch(["--elastic", "--min-np", "2", "--max-np", "3",
                                 "--timeline-filename", str(tmp_path / "t.json"), *extra,
                                 *DIGITS, "--commit-every", "30", "--fail-at", f"200:1{how}",
                                 "--events", str(events)])
    shown = f"exit status {rc} after {took:.1f}s\nstdout:\n{out}\nstderr:\n{err[-6000:]}"
    return rc, out, err, shown, events


@pytest.mark.parametrize("how", ["", ":raise"], ids=["sigkill", "raise"])
def test_a_failed_rank_rolls_back_to_the_last_commit_and_the_job_finishes(tmp_path, how):
    rc, out, err, shown, events = failing_digits(tmp_path, how)
    assert rc == 0, shown
    why = ("killed by SIGKILL" if not how else
           "exit code 1: RuntimeError: rank 1 fails on purpose at step 200")
    assert f"hvliterun: elastic: restart 1/3 after rank 1 on {HOST}, {why}" in err, shown
    assert "root cause (first to fail): rank 1" in err, shown      # the launch's summary
    history = read_events(events)
    applied, restores, done = check_history(history)
    assert [r["size"] for r in restores] == [3, 3], restores
    # rank 1 failed before step 200; the last commit was at step 180: 20 steps are redone
    assert restores[1]["step"] == 180 and restores[1]["commit"] == 6, restores[1]
    # rank 0 logs step 199 after its all-reduce; rank 1 may fail (and mpiexec end rank 0)
    # before that line is written on a loaded machine
    assert max(applied[0]) in (198, 199) and applied[1][0] == 180, shown
    assert restores[1]["cause"].startswith(f"restart 1/3 after rank 1 on {HOST}, {why}")
    assert done["accuracy"] >= 0.95, done
    assert "parameters identical on every rank: True" in out, shown
    seconds = recovery_seconds(history)
    print(f"\nfailure ({how or 'sigkill'}) to the first step after restart: {seconds:.2f} s")
    assert 0 < seconds < RECOVERY_BOUND, shown
    # the relaunch's timeline marks the restore, with its cause
    marks = [e for e in json.loads((tmp_path / "t.launch1.json").read_text())
             if e.get("name") == "elastic.sync (launch 1)"]
    assert len(marks) == 1 and marks[0]["args"]["commit"] == 6, marks
    assert marks[0]["args"]["cause"] == restores[1]["cause"], marks
    assert (tmp_path / "t.json").exists()


def digits_while_discovery_changes(tmp_path, before, after, extra=()):
    """The digits job under --elastic with discovery showing `before` slots, then `after` once
    the job has taken step 40. The job holds at its commit of step 60 until hvliterun acts
    (--hold-at), so it cannot finish before discovery is polled however fast it trains.
    Returns rc, out, err, took and the events file."""
    hosts, events = tmp_path / "hosts", tmp_path / "events.jsonl"
    hosts.write_text(f"localhost:{before}\n")
    stop = threading.Event()

    def change_after_step_40():
        while not stop.wait(0.05):
            try:
                seen = read_events(events)
            except (OSError, ValueError):
                continue
            if any(e["event"] == "step" and e["step"] >= 40 for e in seen):
                hosts.write_text(f"localhost:{after}\n")
                return
    watcher = threading.Thread(target=change_after_step_40, daemon=True)
    watcher.start()
    try:
        rc, out, err, took = launch(["--elastic", "--min-np", "2", "--max-np", "3",
                                     "--host-discovery-script", f"cat {hosts}",
                                     "--discovery-interval", "0.25", *DIGITS, *extra,
                                     "--hold-at", "60", "--events", str(events)])
    finally:
        stop.set()
        watcher.join()
    return rc, out, err, took, events


def test_discovery_adds_a_slot_and_the_job_grows_from_2_to_3(tmp_path):
    rc, out, err, took, events = digits_while_discovery_changes(tmp_path, 2, 3, ["--epochs", "20"])
    shown = f"exit status {rc} after {took:.1f}s\nstdout:\n{out}\nstderr:\n{err[-6000:]}"
    assert rc == 0, shown
    assert "discovery shows 3 slot(s), 2 in use: asking the job to stop at its next commit" in err
    assert "not counted as a restart" in err and "restart 1/" not in err, shown
    applied, restores, done = check_history(read_events(events), total=20 * 22)
    assert [r["size"] for r in restores] == [2, 3], restores
    assert restores[1]["cause"] == "hosts added (the job had 2 rank(s))", restores[1]
    assert restores[1]["step"] == 60 and done["accuracy"] >= 0.95, (restores, done)
    assert "ranks 3, elastic, launch 1" in out, shown


def test_max_restarts_0_gives_the_plain_failure(tmp_path):
    """tests/run/faulty.py's SIGKILLed rank (test_failures.py's job) under --elastic: the same
    summary and a failed status, no second launch, and the commit directory removed (nothing
    was committed)."""
    marker = f"hvlite-test-elastic-{os.getpid()}"
    rc, out, err, took = launch(["--elastic", "-np", "3", "--max-restarts", "0", sys.executable,
                                 FAULTY, "kill", "1", marker], timeout=120)
    shown = f"exit status {rc} after {took:.1f}s\nstdout:\n{out}\nstderr:\n{err}"
    assert rc != 0 and "finished normally" not in out, shown
    assert f"  rank 1 on {HOST}: killed by SIGKILL" in err, shown
    for r in (0, 2):
        assert f"  rank {r} on {HOST}: killed by mpiexec after rank 1 failed" in err, shown
    assert f"root cause (first to fail): rank 1 on {HOST}, SIGKILL" in err, shown
    assert "giving up: rank 1" in err and "--max-restarts 0" in err, shown
    assert "launch 1" not in err and "restart 1" not in err and "kept in" not in err, shown


def test_gives_up_after_max_restarts_and_below_min_np(tmp_path):
    rc, out, err, took = launch(["--elastic", "--max-np", "2", "--max-restarts", "2",
                                 "--elastic-dir", str(tmp_path / "d"), sys.executable, "-c",
                                 "import sys; sys.exit(3)"], timeout=120)
    assert rc in (3, 9), err            # hydra's status: the rank's, or 9 for one it killed
    assert err.count("hvliterun: elastic: launch ") == 3 and err.count(" FAILED (exit status ") == 3
    assert "restart 1/2 after rank " in err and "restart 2/2 after rank " in err, err
    assert "giving up: rank " in err and "2 restart(s) already, --max-restarts 2" in err, err
    (tmp_path / "hosts").write_text("localhost:1\n")
    rc, out, err, took = launch(["--elastic", "--min-np", "2", "--max-np", "3",
                                 "--host-discovery-script", f"cat {tmp_path / 'hosts'}",
                                 "--elastic-timeout", "1", "--discovery-interval", "0.2",
                                 sys.executable, "-c", "pass"], timeout=60)
    assert rc != 0 and "only 1 slot(s) available, fewer than --min-np 2 after waiting 1 s: " \
        "giving up" in err, err


@pytest.mark.elastic_long
def test_a_host_gone_from_discovery_restarts_the_job_smaller(tmp_path):
    rc, out, err, took, events = digits_while_discovery_changes(tmp_path, 3, 2)
    shown = f"exit status {rc}\nstdout:\n{out}\nstderr:\n{err[-6000:]}"
    assert rc == 0, shown
    assert "host localhost down to 2 slot(s) in discovery, 3 in use: stopping the job" in err
    assert "restart 1/3 after host localhost down to 2 slot(s)" in err, shown
    applied, restores, done = check_history(read_events(events))
    assert [r["size"] for r in restores] == [3, 2] and done["accuracy"] >= 0.95, restores


@pytest.mark.elastic_long
def test_a_kept_elastic_dir_resumes_in_a_new_job(tmp_path):
    """A job that gives up keeps its commits (printing where); a new hvliterun given that
    directory starts from the last of them, here on fewer ranks."""
    d = tmp_path / "commits"
    rc, out, err, shown, events = failing_digits(tmp_path, "", ["--max-restarts", "0",
                                                               "--elastic-dir", str(d)])
    assert rc != 0 and (d / "rank-0").is_dir(), shown
    assert f"the commits are kept in {d}: run again with --elastic-dir {d}" in err, shown
    rc, out, err, took = launch(["--elastic", "--max-np", "2", "--elastic-dir", str(d), *DIGITS,
                                 "--events", str(events)])
    assert rc == 0, err
    restores = [e for e in read_events(events) if e["event"] == "restore"]
    assert [(r["size"], r["step"]) for r in restores] == [(3, 0), (2, 180)], restores


# -- the command line and the pieces, without MPI ------------------------------------------------

@pytest.mark.parametrize("argv,fragment", [
    (["--min-np", "2", "-np", "2", "python"], "--min-np only apply with --elastic"),
    (["--max-restarts", "0", "-np", "2", "python"], "--max-restarts only apply with --elastic"),
    (["--elastic", "python"], "needs --max-np"),
    (["--elastic", "--min-np", "3", "--max-np", "2", "python"], "more than --max-np"),
    (["--elastic", "--min-np", "2", "-np", "5", "--max-np", "4", "python"], "outside --min-np"),
    (["--elastic", "--max-np", "2", "-H", "a:2", "--host-discovery-script", "x", "python"],
     "not both"),
    (["--elastic", "-np", "3", "--servers", "1", "python"], "parameter-server"),
    (["--elastic", "-np", "2", "--no-supervise", "python"], "supervisor"),
])
def test_bad_elastic_command_lines(argv, fragment):
    with pytest.raises(launcher.LaunchError, match=fragment):
        launcher.parse_args(argv)


def test_elastic_defaults_come_from_np():
    args = launcher.parse_args(["--elastic", "-np", "3", "python", "x.py"])
    assert (args.min_np, args.max_np, args.max_restarts) == (3, 3, 3)
    args = launcher.parse_args(["--elastic", "--max-np", "4", "python", "x.py"])
    assert (args.np, args.min_np, args.max_np) == (None, 1, 4)


def test_discovery_output_and_allocation():
    assert elastic.parse_discovery("a:2\n# comment\n\nb\na:1\nc:0\n") == [("a", 3), ("b", 1)]
    for bad in ("a:x", "a b:2", ":2"):
        with pytest.raises(elastic.ElasticError, match="expected 'host:slots'"):
            elastic.parse_discovery(bad)
    for bad, why in (("-oProxyCommand=x:2", "begins with '-'"), ("a/b", "holds '/'")):
        with pytest.raises(elastic.ElasticError, match=f"discovery printed {bad!r}: .* is not a "
                           f"host name \\(it {why}"):
            elastic.parse_discovery(f"good:1\n{bad}\n")
    assert elastic.allocate([("a", 2), ("b", 2)], 3) == [("a", 2), ("b", 1)]
    assert elastic.allocate([("a", 2)], 2) == [("a", 2)]
    assert elastic.launch_path("t.json", 2) == "t.launch2.json"
    rec = {"rank": 1, "host": "h", "state": "exited", "exit_code": 1, "signal": None,
           "first_error": "ValueError: boom"}
    assert elastic.describe(rec) == "rank 1 on h, exit code 1: ValueError: boom"
    assert elastic.describe(dict(rec, signal="SIGKILL", first_error=None)) == \
        "rank 1 on h, killed by SIGKILL"
    assert elastic.describe(None) is None


def test_the_notice_and_the_directory_are_private(tmp_path, monkeypatch):
    import stat
    victim = tmp_path / "victim"
    victim.write_text("precious")
    d = elastic.prepare_directory(str(tmp_path / "commits"))
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    os.symlink(victim, os.path.join(d, elastic.NOTICE))
    elastic.post_notice(d, 5)
    st = os.lstat(os.path.join(d, elastic.NOTICE))
    assert victim.read_text() == "precious" and stat.S_ISREG(st.st_mode) and \
        stat.S_IMODE(st.st_mode) == 0o600 and open(os.path.join(d, elastic.NOTICE)).read() == "5\n"
    real = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real + 1)
    with pytest.raises(OSError, match="belongs to user id .* not to this user"):
        elastic.prepare_directory(d)


def test_a_directory_of_another_user_is_refused_by_hvliterun(tmp_path):
    if os.geteuid() == 0:
        os.chown(tmp_path, 65534, 65534)         # nobody's
        d = tmp_path
    else:
        d = "/"                                  # root's
    out = run_bounded(HVLITERUN + ["--elastic", "-np", "1", "--elastic-dir", str(d),
                                   sys.executable, "-c", "pass"], 60, "hvliterun", cwd=None,
                      merge_stderr=False)
    assert out[0] == 2 and "not to this user" in out[2] and \
        f"cannot use the elastic directory {str(d)!r}" in out[2], out


def test_history_check_can_fail():
    ok = [{"event": "restore", "launch": 0, "step": 0, "commit": 0, "digest": "a", "cause": None},
          {"event": "step", "launch": 0, "step": 0}, {"event": "step", "launch": 0, "step": 1},
          {"event": "commit", "launch": 0, "step": 2, "commit": 1, "digest": "b"},
          {"event": "step", "launch": 0, "step": 2},
          {"event": "restore", "launch": 1, "step": 2, "commit": 1, "digest": "b", "cause": "x"},
          {"event": "step", "launch": 1, "step": 2}, {"event": "step", "launch": 1, "step": 3},
          {"event": "done", "step": 4}]
    check_history(ok, total=4)
    for broken in (
            [dict(e, step=1) if e["event"] == "restore" and e["launch"] == 1 else e for e in ok],
            [dict(e, digest="c") if e["event"] == "restore" and e["launch"] == 1 else e
             for e in ok],
            ok[:-3] + [{"event": "step", "launch": 1, "step": 2}] * 2 + ok[-1:]):
        with pytest.raises(AssertionError):
            check_history(broken, total=4)


def test_the_shipped_discovery_script_speaks_hvliteruns_format(tmp_path):
    """docs/elastic.md and the README point at examples/hosts.sh: it must run and parse."""
    from hvlite.run.elastic import parse_discovery
    script = os.path.join(ROOT, "examples", "hosts.sh")
    out = subprocess.run([script], capture_output=True, text=True, timeout=20, env={"PATH": "/bin:/usr/bin"})
    assert out.returncode == 0 and parse_discovery(out.stdout) == [("localhost", 2)], out
    (tmp_path / "slots").write_text("3\n")
    out = subprocess.run([script], capture_output=True, text=True, timeout=20,
                         env={"PATH": "/bin:/usr/bin", "HOSTS_SLOTS_FILE": str(tmp_path / "slots")})
    assert parse_discovery(out.stdout) == [("localhost", 3)], out
