"""Launch rank-side test modules under mpiexec with a hard timeout.

`run_mpi(n, "tests/mpi/mpi_x.py", ...)` runs pytest on that file in every rank. A non-zero exit or
a timeout fails the calling test and shows every rank's output, lines prefixed by rank; on a
timeout the whole process group is killed, so a hang costs its timeout and never the CI run.
"""
import os
import re
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


_FLAVORS = {}


def mpiexec_flavor(mpiexec):
    """"openmpi" for Open MPI's launcher (`make test-openmpi`), else "mpich" (hydra: MPICH,
    Intel MPI): the two spell their options differently."""
    if mpiexec not in _FLAVORS:
        try:
            out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
            text = (out.stdout + out.stderr).lower()
        except (OSError, subprocess.SubprocessError):
            text = ""
        _FLAVORS[mpiexec] = "openmpi" if "open mpi" in text or "open-mpi" in text else "mpich"
    return _FLAVORS[mpiexec]


def launch_prefix(mpiexec, n):
    """mpiexec -n N with each output line tagged by its rank (hydra: `[r] `), more ranks than
    cores allowed."""
    if mpiexec_flavor(mpiexec) == "openmpi":
        return [mpiexec, "-n", str(n), "--oversubscribe", "--output", "tag"]
    return [mpiexec, "-n", str(n), "-prepend-rank"]


def _descendants(root):
    """Every process below `root` (mpiexec's proxies put each rank in a group of its own)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _dump_python_stacks(root, grace=5.0):
    """Before a hung launch is killed: SIGABRT its Python processes, whose fault handler (pytest
    turns it on, PYTHONFAULTHANDLER elsewhere) prints every thread's stack into the output, so
    the report shows where each rank waited."""
    pids = []
    for pid in _descendants(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0]
        except OSError:
            continue
        if b"python" in os.path.basename(argv0):
            pids.append(pid)
    native = _native_stacks(pids)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGABRT)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if not _gone(p)]
        time.sleep(0.1)
    return native


_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(")


def _compact_stacks(text):
    """gdb's backtraces as one line per thread, innermost first: the first frames and every
    frame of the extension modules, without the interpreter's own."""
    lines, frames, head = [], [], None
    for ln in text.splitlines() + ["Thread end"]:
        if ln.startswith("Thread"):
            if head is not None:
                lines.append(f"  {head}: " + " <- ".join(frames))
            head, frames = ln.split("(", 1)[0].strip(), []
            continue
        m = _FRAME.match(ln)
        if not m:
            continue
        fn = m.group(1)
        if "__pyx_" in fn:
            frames.append(re.sub(r"^__pyx_\w*?_\d+hvlite_\d+_core_\d+", "", fn))
        elif len(frames) < 4 and not fn.startswith(("_Py", "Py", "cfunction", "method_")):
            frames.append(fn)
    return "\n".join(lines)


def _native_stacks(pids, limit=8):
    """Every thread's C stack of up to `limit` hung processes (gdb, where it is installed and
    may attach): the coordinator's threads run without Python frames."""
    gdb = shutil.which("gdb")
    if not gdb:
        return ""
    out = []
    for pid in pids[:limit]:
        try:
            r = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
                                "-ex", "thread apply all bt 30"], capture_output=True,
                               text=True, timeout=30)
            out.append(f"native stacks of pid {pid}:\n" + _compact_stacks(r.stdout))
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append(f"--- pid {pid}: gdb failed: {e}")
    return "\n".join(out)


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


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
        native = _dump_python_stacks(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        if on_timeout:
            on_timeout()
        out, err = proc.communicate()
        pytest.fail(f"{what} hung: killed after {timeout}s. Output:\n{out}\n{err or ''}\n{native}",
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
        cmd = launch_prefix(mpiexec, n) + inner + list(args)
    full_env = dict(os.environ)
    full_env["PYTHONUNBUFFERED"] = "1"
    full_env["PYTHONFAULTHANDLER"] = "1"           # a hung rank's stacks, when the timeout hits
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
