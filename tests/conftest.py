"""Launch rank-side test modules under mpiexec with a hard timeout.

`run_mpi(n, "tests/mpi/mpi_x.py", ...)` runs pytest on that file in every rank. A non-zero exit or
a timeout fails the calling test and shows every rank's output, lines prefixed by rank; on a
timeout the whole process group is killed, so a hang costs its timeout and never the CI run.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mpiexec_path():
    explicit = os.environ.get("HVLITE_MPIEXEC")
    if explicit:
        return explicit
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def run_bounded(cmd, timeout, what, env=None, cwd=ROOT, merge_stderr=True, on_timeout=None):
    """Run cmd in a session of its own; past `timeout` kill its whole process group (then call
    on_timeout(), to kill what escaped it) and fail the test showing the output. Returns
    (returncode, stdout, stderr or None, seconds)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                            start_new_session=True, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        if on_timeout:
            on_timeout()
        out, err = proc.communicate()
        pytest.fail(f"{what} hung: killed after {timeout}s. Output:\n{out}\n{err or ''}",
                    pytrace=False)
    return proc.returncode, out, err, time.monotonic() - t0


def run_mpi(n, target, *args, env=None, timeout=120, pytest_module=True, rank_env=None):
    """Run `target` (a rank-side pytest file, or a plain script if pytest_module=False) on n ranks.
    `rank_env`: {rank: {variable: value}}, set on those ranks only (mpiexec's MPMD form: one
    `-n 1 -env ...` segment per rank), for settings that differ between ranks."""
    mpiexec = mpiexec_path()
    if not mpiexec:
        pytest.fail("no mpiexec found (run `make install`, or set HVLITE_MPIEXEC)")
    path = os.path.join(ROOT, target)
    inner = ([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-header",
              "-rfE", path] if pytest_module else [sys.executable, path])
    if rank_env:
        cmd = [mpiexec, "-prepend-rank"]
        for r in range(n):
            if r:
                cmd.append(":")
            cmd += ["-n", "1"]
            for k, v in (rank_env.get(r) or {}).items():
                cmd += ["-env", k, str(v)]
            cmd += inner + list(args)
    else:
        cmd = [mpiexec, "-n", str(n), "-prepend-rank"] + inner + list(args)
    full_env = dict(os.environ)
    full_env["PYTHONUNBUFFERED"] = "1"
    full_env.update(env or {})
    rc, out, _, took = run_bounded(
        cmd, timeout, f"{target} on {n} ranks (env {env or {}}, per rank {rank_env or {}})",
        env=full_env)
    if rc != 0:
        pytest.fail(f"{target} on {n} ranks exited {rc} after "
                    f"{took:.1f}s (env {env or {}}, per rank {rank_env or {}}). "
                    f"Output of every rank:\n{out}",
                    pytrace=False)
    return out


@pytest.fixture
def mpirun():
    return run_mpi
