"""One rank under hvliterun's supervision: `python .../hvlite/run/rank.py command [args ...]`
(or `python -m hvlite.run.rank ...`, which imports hvlite first).

hvliterun starts every rank through this wrapper (unless --no-supervise). It runs the command as
a child that inherits every file descriptor and the environment (MPICH's hydra hands the rank
its PMI connection as PMI_FD), in a process group of its own and killed if the wrapper is,
forwards the signals the launcher sends (FORWARDED), copies the child's
stderr to its own unchanged (stdout is not touched: the child writes straight to it), and keeps
a small JSON record of the rank in $HVLITE_RUN_STATUS_DIR: written when the rank starts,
rewritten when its first error line appears, and rewritten with the exit code or signal when it
ends, each time atomically (a temporary file renamed over the old one). The wrapper then exits
as the child did: with its exit code, or killed by the same signal, so mpiexec sees the same.

The first error line of a rank: the line that ends the first Python traceback on its stderr (the
first unindented line after `Traceback (most recent call last):`, e.g. `ValueError: boom`);
without a traceback, the first line that matches ERROR_PATTERN (a word ending in `Error` or
`Exception`, `error:`, `ERROR`, `FATAL`, `Fatal error`, `Segmentation fault`, `Abort`, an OS
error such as Python's `can't open file ...: [Errno 2] No such file or directory`, a shell's
`command not found`, `Permission denied`).

A rank that exits with status 0 while hvlite is still running in it (os._exit(0), say: no
shutdown(), no MPI_Finalize) would end the job with status 0 and its peers without a word; hvlite
marks its state in the same directory (`hvlite-<rank>.state`: "running" from init() until
shutdown()), and such an exit is recorded and passed on as a failure with status 1.

This module uses the standard library only: it runs before, and apart from, the rank's program.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

STATUS_DIR_ENV = "HVLITE_RUN_STATUS_DIR"
TRACEBACK = "Traceback (most recent call last):"
ERROR_PATTERN = re.compile(r"\w(Error|Exception)\b|\berror:|\bERROR\b|\bFATAL\b|Fatal error"
                           r"|Segmentation fault|\bAbort|\[Errno \d+\]|No such file or directory"
                           r"|command not found|Permission denied")
MAX_LINE = 500                  # characters of the first error line kept in the record
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT", "SIGTSTP")
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
                  "SLURM_PROCID")


class FirstErrorLine:
    """Feed lines of a stream; `.line` is its first error line (the rule above), or None.
    `.final` says no later line can change it (a traceback's line was found)."""

    def __init__(self):
        self.line = None
        self.final = False
        self._in_traceback = False

    def feed(self, line):
        """Returns True when `.line` changed."""
        if self.final:
            return False
        text = line.rstrip("\r\n")
        if self._in_traceback:
            if text and not text[0].isspace():
                self.line, self.final = text[:MAX_LINE], True
                return True
            return False
        if text.lstrip().startswith(TRACEBACK):
            self._in_traceback = True
            return False
        if self.line is None and ERROR_PATTERN.search(text):
            self.line = text.strip()[:MAX_LINE]
            return True
        return False


def first_error_line(text):
    """The first error line of a whole text (the rule above), or None."""
    scan = FirstErrorLine()
    for line in text.splitlines():
        scan.feed(line)
    return scan.line


def rank_from_env(env=os.environ):
    for var in RANK_VARIABLES:
        value = env.get(var, "")
        if value.isdigit():
            return int(value)
    return None


def signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Record:
    """The rank's JSON record, rewritten atomically in the status directory (if there is one)."""

    def __init__(self, directory, argv):
        self.directory = directory if directory and os.path.isdir(directory) else None
        self.lock = threading.Lock()
        rank = rank_from_env()
        self.data = {"rank": rank, "host": socket.gethostname(), "pid": None,
                     "wrapper_pid": os.getpid(), "command": argv[:8], "state": "running",
                     "exit_code": None, "signal": None, "first_error": None, "error_time": None,
                     "start_time": time.time(), "end_time": None, "wall_time": None}
        name = f"rank-{rank}" if rank is not None else f"pid-{socket.gethostname()}-{os.getpid()}"
        self.path = os.path.join(self.directory, name + ".json") if self.directory else None

    def update(self, **fields):
        with self.lock:
            self.data.update(fields)
            if not self.path:
                return
            tmp = f"{self.path}.tmp-{os.getpid()}"
            try:
                with open(tmp, "w") as f:
                    json.dump(self.data, f)
                os.replace(tmp, self.path)
            except OSError:             # a record is a courtesy: never the reason a rank fails
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


def _copy(fd, record, scan):
    """Copy the child's stderr (`fd`) to ours byte for byte, watching its lines for the first
    error line, which is recorded as soon as it appears."""
    pending = b""
    out_ok = True
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        if out_ok:
            try:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(2, view):]
            except OSError:             # our stderr is gone (the launcher died): keep draining
                out_ok = False
        if scan.final:
            continue
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > 65536:        # a very long line without a newline: scan what there is
            lines.append(pending)
            pending = b""
        for raw in lines:
            _scan_line(raw, record, scan)
            if scan.final:
                break
    if pending and not scan.final:
        _scan_line(pending, record, scan)
    os.close(fd)


def _scan_line(raw, record, scan):
    if scan.feed(raw.decode("utf-8", "replace")):
        record.update(first_error=scan.line, error_time=record.data["error_time"] or time.time())


def _pdeathsig():
    """A function that, called in the child before exec, has it SIGKILLed when the wrapper dies
    (Linux's PR_SET_PDEATHSIG); loaded before the fork. None where there is no such thing."""
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGKILL, 0, 0, 0)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m hvlite.run.rank command [args ...]", file=sys.stderr)
        return 2
    record = Record(os.environ.get(STATUS_DIR_ENV), argv)
    parent, die_with_parent = os.getpid(), _pdeathsig()

    def preexec():
        # Its own process group: a signal the launcher sends to the wrapper's group reaches
        # the child once, forwarded by us. If the wrapper is killed, the child follows.
        os.setpgid(0, 0)
        if die_with_parent:
            die_with_parent()
            if os.getppid() != parent:  # the wrapper died before that took hold
                os._exit(1)

    child, early = None, []

    def forward(signum, frame):
        if child is None:
            early.append(signum)
        elif child.returncode is None:
            try:
                child.send_signal(signum)
            except OSError:
                pass
    for name in FORWARDED:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), forward)

    try:      # stdout is the launcher's own, untouched; stderr comes through us
        child = subprocess.Popen(argv, stderr=subprocess.PIPE, close_fds=False,
                                 preexec_fn=preexec)
    except OSError as e:
        print(f"hvliterun: cannot run {argv[0]!r}: {e.strerror}", file=sys.stderr, flush=True)
        now = time.time()
        record.update(state="exited", exit_code=127, first_error=f"cannot run {argv[0]!r}: "
                      f"{e.strerror}", error_time=now, end_time=now, wall_time=0.0)
        return 127
    record.update(pid=child.pid)
    for signum in early:
        forward(signum, None)

    scan = FirstErrorLine()
    copier = threading.Thread(target=_copy, args=(os.dup(child.stderr.fileno()), record, scan),
                              daemon=True)
    child.stderr.close()
    copier.start()
    code = child.wait()
    copier.join(timeout=2.0)          # the rest of its stderr (a grandchild may hold it open)
    end = time.time()
    fields = dict(state="exited", end_time=end, wall_time=round(end - record.data["start_time"], 3))
    if code < 0:
        fields["signal"] = signal_name(-code)
    else:
        fields["exit_code"] = code
    if code == 0 and hvlite_state(record) == "running":
        code = 1
        fields.update(exit_code=1, error_time=end, first_error=record.data["first_error"] or
                      "exited with status 0 while hvlite was running in it (no shutdown(): "
                      "os._exit(0)?); its peers cannot go on without it")
    record.update(**fields)
    sys.stderr.flush()
    if code < 0:
        _exit_by_signal(-code)
    return code


def hvlite_state(record):
    """What hvlite last wrote of itself in this rank's state file ("running", "stopped"), or
    None (no file: hvlite never started, or no status directory)."""
    rank = record.data.get("rank")
    if not record.directory or rank is None:
        return None
    try:
        with open(os.path.join(record.directory, f"hvlite-{rank}.state")) as f:
            return f.read().strip()
    except OSError:
        return None


def _exit_by_signal(signum):
    """Die of `signum`, as the child did, without leaving a core file of the wrapper."""
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    try:
        signal.signal(signum, signal.SIG_DFL)           # (SIGKILL and SIGSTOP have no handler)
    except (OSError, ValueError):
        pass
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), signum)
    time.sleep(1.0)                     # a signal whose default is not to terminate
    os._exit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
