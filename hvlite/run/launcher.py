"""hvliterun -np N [-H host1:4,host2:4 | --hostfile F] [options] command ...

Builds and runs the mpiexec of the MPI hvlite was built against (MPICH's hydra or Open MPI),
passing hvlite's settings as environment variables to every rank, forwarding SIGINT/SIGTERM/
SIGHUP to the job, and exiting with the job's status.

Each rank runs under a small supervisor (hvlite/run/rank.py, unless --no-supervise) that records
how it ended; when the job fails, hvliterun prints a summary of the failed ranks (which, where,
exit code or signal, first error line, which failed first), ends the job's leftover processes,
and removes the MPI shared-memory files the job left in /dev/shm (hvlite/run/cleanup.py).
"""
import argparse
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile

from hvlite.config import ALGORITHMS
from hvlite.run import cleanup, elastic, emulated, summary
from hvlite.run.hosts import bad_host_name
from hvlite.run.rank import STATUS_DIR_ENV

RANK_WRAPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank.py")


class LaunchError(Exception):
    """A problem with the command line or the environment, reported before anything starts."""


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"-np must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"-np must be a positive integer, got {text!r}")
    return value


def parser():
    p = argparse.ArgumentParser(prog="hvliterun", description=__doc__.split("\n")[0],
                                usage="hvliterun -np N [options] command [args ...]")
    p.add_argument("-np", "--num-proc", dest="np", type=_positive_int, help="number of ranks")
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", help="host1:slots,host2:slots (slots default to 1)")
    hosts.add_argument("--hostfile", help="one host per line: 'host slots=N', 'host:N' or 'host'")
    p.add_argument("--timeline-filename", help="write a Chrome trace (HVLITE_TIMELINE)")
    p.add_argument("--timeline-mark-cycles", action="store_true")
    p.add_argument("--fusion-threshold-mb", type=float, help="HVLITE_FUSION_THRESHOLD, in MiB")
    p.add_argument("--cycle-time-ms", type=float, help="HVLITE_CYCLE_TIME")
    p.add_argument("--cache-capacity", type=int, help="HVLITE_CACHE_CAPACITY")
    p.add_argument("--algorithm", choices=ALGORITHMS, help="HVLITE_ALLREDUCE_ALGORITHM")
    p.add_argument("--autotune", action="store_true", help="HVLITE_AUTOTUNE=1")
    p.add_argument("--autotune-log-file", help="HVLITE_AUTOTUNE_LOG")
    p.add_argument("--stall-check-seconds", type=float, help="HVLITE_STALL_CHECK_TIME_SECONDS")
    p.add_argument("--stall-shutdown-seconds", type=float, help="HVLITE_STALL_SHUTDOWN_TIME_SECONDS")
    p.add_argument("--servers", type=int, help="hvlite.ps server ranks (HVLITE_PS_SERVERS)")
    p.add_argument("--mpi-thread-level", choices=("single", "funneled", "serialized", "multiple"))
    p.add_argument("--mpiexec", help="the mpiexec to use (default: the one next to this Python)")
    p.add_argument("--verbose", action="store_true", help="print the mpiexec command; debug logging")
    p.add_argument("--no-supervise", dest="supervise", action="store_false",
                   help="start the ranks directly, without the per-rank supervisor (no failure "
                        "summary)")
    p.add_argument("--status-dir", help="where the ranks' records go (default: a temporary "
                                        "directory on this host; for ranks on other hosts, a "
                                        "directory every host sees)")
    p.add_argument("--check-build", action="store_true",
                   help="print hvlite's and MPI's versions, thread level, algorithms, and exit")
    elastic.add_arguments(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program each rank runs")
    return p


def parse_args(argv):
    args = parser().parse_args(argv)
    if args.check_build:
        return args
    problem = elastic.check_args(args)
    if problem:
        raise LaunchError(problem)
    if args.np is None and not args.elastic:
        raise LaunchError("hvliterun: -np N is required (the number of ranks)")
    if not args.command:
        raise LaunchError("hvliterun: no command given; e.g. hvliterun -np 2 python train.py")
    if args.servers is not None and not 1 <= args.servers < args.np:
        raise LaunchError(f"hvliterun: --servers {args.servers} with -np {args.np}: a parameter "
                          "server job needs 1 <= servers < ranks (the other ranks are workers)")
    return args


def parse_hosts(spec):
    """'a:4,b:2,c' -> [('a', 4), ('b', 2), ('c', 1)]; errors name the bad entry."""
    hosts = []
    for item in spec.split(","):
        item = item.strip()
        name, _, slots = item.partition(":")
        if not name or any(c.isspace() for c in name) or (_ and not slots):
            raise LaunchError(f"hvliterun: bad host entry {item!r}; use host or host:slots")
        problem = bad_host_name(name)
        if problem:
            raise LaunchError(f"hvliterun: bad host entry {item!r}: {problem}")
        try:
            n = int(slots) if slots else 1
        except ValueError:
            raise LaunchError(f"hvliterun: bad slot count in {item!r}; use host:slots") from None
        if n < 1:
            raise LaunchError(f"hvliterun: slot count must be positive in {item!r}")
        hosts.append((name, n))
    return hosts


def read_hostfile(path):
    hosts = []
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        raise LaunchError(f"hvliterun: cannot read hostfile {path!r}: {e.strerror}") from None
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) == 2 and parts[1].startswith("slots="):
            line = f"{parts[0]}:{parts[1][len('slots='):]}"
        elif len(parts) != 1:
            raise LaunchError(f"hvliterun: bad hostfile line {line!r} in {path}")
        try:
            hosts.extend(parse_hosts(line))
        except LaunchError as e:
            raise LaunchError(f"{e} (hostfile {path})") from None
    if not hosts:
        raise LaunchError(f"hvliterun: hostfile {path!r} lists no hosts")
    return hosts


def loaded_libmpi():
    """The MPI library files hvlite's core has loaded in this process (from /proc/self/maps):
    the core binds to its build's libmpi, or to the one mpi4py found (hvlite/_core)."""
    try:
        import hvlite._core  # noqa: F401 - loads the MPI library, starts nothing
        with open("/proc/self/maps") as f:
            paths = {line.rsplit(None, 1)[-1] for line in f if "/libmpi" in line}
    except (ImportError, OSError):
        return []
    return sorted(p for p in paths if ".so" in os.path.basename(p))


def beside_libmpi():
    """The launcher of the MPI hvlite runs on: <prefix>/bin/mpiexec for <prefix>/lib*/libmpi.so
    (an MPI wheel's or a system MPI's own tree)."""
    for lib in loaded_libmpi():
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(lib)))
        for name in ("mpiexec", "mpirun"):
            cand = os.path.join(prefix, "bin", name)
            if os.access(cand, os.X_OK):
                return cand
    return None


def find_mpiexec(explicit=None):
    """--mpiexec, else $HVLITE_MPIEXEC, else the one next to this Python, else the one of the
    MPI library hvlite runs on, else PATH's. One that is asked for by name but missing is an
    error, never silently replaced."""
    for how, cand in (("--mpiexec", explicit), ("HVLITE_MPIEXEC", os.environ.get("HVLITE_MPIEXEC"))):
        if cand:
            found = cand if os.path.exists(cand) else shutil.which(cand)
            if not found:
                raise LaunchError(f"hvliterun: {how} {cand!r} not found")
            return found
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(here):
        return here
    found = beside_libmpi() or shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        raise LaunchError("hvliterun: no mpiexec found (install hvlite with `make install`, put "
                          "your MPI's mpiexec on PATH, or pass --mpiexec)")
    return found


def mpi_flavor(mpiexec):
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=20)
        text = (out.stdout + out.stderr).lower()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if "open mpi" in text or "open-mpi" in text or "openrte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel" in text:
        return "mpich"
    return "unknown"


# option -> (environment variable, how its value is written); options left unset pass nothing
_SETTINGS = {
    "timeline_filename": ("HVLITE_TIMELINE", str),
    "timeline_mark_cycles": ("HVLITE_TIMELINE_MARK_CYCLES", lambda v: "1"),
    "fusion_threshold_mb": ("HVLITE_FUSION_THRESHOLD", lambda v: str(int(v * (1 << 20)))),
    "cycle_time_ms": ("HVLITE_CYCLE_TIME", str),
    "cache_capacity": ("HVLITE_CACHE_CAPACITY", str),
    "algorithm": ("HVLITE_ALLREDUCE_ALGORITHM", str),
    "autotune": ("HVLITE_AUTOTUNE", lambda v: "1"),
    "autotune_log_file": ("HVLITE_AUTOTUNE_LOG", str),
    "stall_check_seconds": ("HVLITE_STALL_CHECK_TIME_SECONDS", str),
    "stall_shutdown_seconds": ("HVLITE_STALL_SHUTDOWN_TIME_SECONDS", str),
    "mpi_thread_level": ("HVLITE_MPI_THREAD_LEVEL", str),
    "servers": ("HVLITE_PS_SERVERS", str),
    "verbose": ("HVLITE_LOG_LEVEL", lambda v: "debug"),
}


def settings_env(args):
    env = {}
    for option, (var, write) in _SETTINGS.items():
        value = getattr(args, option)
        if value is not None and value is not False:
            env[var] = write(value)
    return env


def build_command(args, mpiexec, flavor, job_env=None, wrapper=()):
    """The mpiexec command line: ranks, hosts, and every setting exported to every rank
    (`job_env`: more variables for every rank; `wrapper`: what runs the command on each rank)."""
    cmd = [mpiexec, "-n", str(args.np)]
    hosts = parse_hosts(args.hosts) if args.hosts else (read_hostfile(args.hostfile) if args.hostfile else None)
    if hosts:
        spec = ",".join(f"{h}:{n}" for h, n in hosts)
        cmd += ["-H", spec] if flavor == "openmpi" else ["-hosts", spec]
    for key, value in sorted({**settings_env(args), **(job_env or {})}.items()):
        cmd += ["-x", f"{key}={value}"] if flavor == "openmpi" else ["-genv", key, value]
    return cmd + list(wrapper) + list(args.command)


def check_build():
    from mpi4py import MPI

    import hvlite
    from hvlite import config
    from hvlite._core.tuning.cost_model import crossovers
    from hvlite.runtime import real_names
    from hvlite._core.codes import core_mpi
    s = config.load()
    started, core_lib = core_mpi()
    if not MPI.Is_initialized():        # MPI4PY_RC_INITIALIZE=0: nothing started to compare with
        started, core_lib = True, core_lib + " (MPI not started: not compared)"
    level_names = {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED: "MPI_THREAD_FUNNELED",
                   MPI.THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED", MPI.THREAD_MULTIPLE: "MPI_THREAD_MULTIPLE"}
    lines = [f"hvlite v{hvlite.__version__}",
             f"  MPI library:      {MPI.Get_library_version().splitlines()[0].strip()}",
             f"  MPI standard:     {'.'.join(map(str, MPI.Get_version()))}; mpi4py {__import__('mpi4py').__version__}",
             f"  mpiexec:          {_safe(find_mpiexec)} ({mpi_flavor(_safe(find_mpiexec))})",
             f"  thread level:     {s.mpi_thread_level} requested (HVLITE_MPI_THREAD_LEVEL); "
             f"this process got {level_names.get(MPI.Query_thread(), '?')}",
             f"  core linked to:   {core_lib}" + ("" if started else
                                                       "  <- NOT the library mpi4py started: "
                                                       "rebuild hvlite against mpi4py's MPI"),
             f"  GPU buffers:      {_gpu_support(s)}",
             "  algorithms:       " + ", ".join(sorted(a for a in ALGORITHMS if a != "auto")) + ", auto",
             "  collectives:      allreduce, allgather, broadcast, alltoall, reducescatter, barrier, join",
             "  auto crossovers (default cost model; jobs measure theirs at init):"]
    model = s.cost_model()
    for n in (2, 4, 8, 16):
        lines.append(f"    {n:>2} ranks, one node: {crossovers(n, model, shm=s.shm)}")
    lines.append(f"    16 ranks, 4 nodes:   "
                 f"{real_names(crossovers(16, model, nodes=4, local_size=4, shm=s.shm), 4)}")
    lines.append("    (a job tries the candidates near each pick on a size class's first calls: "
                 + ("HVLITE_CALIBRATE=1)" if s.calibrate else "off, HVLITE_CALIBRATE=0)"))
    print("\n".join(lines))
    return 0 if started else 1


def _gpu_support(settings):
    """CuPy (found without importing it: that takes a second) and whether device memory goes
    to MPI directly or is staged through host memory (docs/gpu.md)."""
    import importlib.metadata
    import importlib.util
    from hvlite.gpu.cuda_aware import decide
    if importlib.util.find_spec("cupy") is None:
        return "no CuPy (pip install hvlite[cuda] for CuPy arrays and torch CUDA tensors)"
    version = "?"
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if re.fullmatch(r"cupy(-cuda\d+x?|-rocm-[\w-]+)?", name):     # not cupy-xarray and kin
            version = f"{name} {dist.version}"
            break
    aware, why = decide(settings.cuda_aware)
    return (f"{version}; device memory " + ("to MPI directly (CUDA-aware" if aware
                                             else "staged through pinned host memory (not "
                                             "CUDA-aware") + f": {why})")


def _safe(fn):
    try:
        return fn()
    except LaunchError:
        return "none found"


def own_python(command, remote):
    """A bare `python`/`python3` runs hvliterun's own interpreter (the one hvlite is installed
    in), not whichever PATH finds first: `.venv/bin/hvliterun -np 2 python train.py` works
    without an activated venv. Across hosts the command is left as given (a path may differ
    there)."""
    if command and command[0] in ("python", "python3") and not remote:
        found = shutil.which(command[0])
        if found is None or os.path.realpath(found) != os.path.realpath(sys.executable):
            return [sys.executable] + list(command[1:])
    return command


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
        if args.check_build:
            return check_build()
        args.command = own_python(args.command, bool(args.hosts or args.hostfile))
        mpiexec = find_mpiexec(args.mpiexec)
        flavor = mpi_flavor(mpiexec)
        if args.elastic:            # relaunches on failure: hvlite/run/elastic.py
            hosts = parse_hosts(args.hosts) if args.hosts else (
                read_hostfile(args.hostfile) if args.hostfile else None)
            return elastic.main(args, mpiexec, flavor, build_command, settings_env(args), hosts)
        launch_extra, emulated_env = _emulated(args, flavor)
        status_dir = _status_dir(args) if args.supervise else None
    except LaunchError as e:
        print(e, file=sys.stderr)
        return 2
    job_env = {cleanup.JOB_ENV: secrets.token_hex(8), **emulated_env}
    wrapper = ()
    if status_dir:
        job_env[STATUS_DIR_ENV] = status_dir
        wrapper = (sys.executable, RANK_WRAPPER)
    try:
        cmd = build_command(args, mpiexec, flavor, job_env, wrapper)
        cmd[1:1] = launch_extra
        return _launch(args, cmd, job_env, status_dir)
    finally:
        if status_dir:
            shutil.rmtree(status_dir, ignore_errors=True)


def _emulated(args, flavor):
    """The launch path of scripts/cluster.sh's emulated hosts when the job's hosts are those
    (hvlite/run/emulated.py): ([mpiexec arguments], {environment}); nothing for real hosts."""
    hosts = parse_hosts(args.hosts) if args.hosts else (
        read_hostfile(args.hostfile) if args.hostfile else None)
    try:
        found = emulated.launch_settings([h for h, _ in hosts or ()], flavor)
    except ValueError as e:
        raise LaunchError(f"hvliterun: {e}") from None
    return found or ([], {})


def _status_dir(args):
    try:
        return tempfile.mkdtemp(prefix="hvliterun-", dir=args.status_dir)
    except OSError as e:
        raise LaunchError(f"hvliterun: cannot make a status directory in "
                          f"{args.status_dir or tempfile.gettempdir()!r}: {e.strerror}") from None


def _launch(args, cmd, job_env, status_dir):
    if args.verbose:
        print("hvliterun: " + " ".join(cmd), file=sys.stderr, flush=True)
    env = dict(os.environ)
    env.update(settings_env(args))
    shm_before = cleanup.shm_listing()
    try:
        proc = subprocess.Popen(cmd, env=env)
    except OSError as e:
        print(f"hvliterun: cannot start {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 2
    received = []

    def forward(signum, frame):
        received.append(signum)
        proc.send_signal(signum)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    rc = proc.wait()
    rc = rc if rc >= 0 else 128 - rc
    return _after(args, rc, job_env, status_dir, shm_before, received)


def _after(args, rc, job_env, status_dir, shm_before, received):
    """After mpiexec returned: the summary, the job's leftovers, the exit status."""
    records = summary.read_records(status_dir) if status_dir else []
    failed = summary.job_failed(records, rc)
    status = rc if rc != 0 or not failed else 1      # mpiexec's, or 1 where only a record failed
    if records and failed:         # (no record at all: mpiexec started nothing, and said why)
        text = summary.format_summary(
            records, status, args.command, args.np,
            signal.Signals(received[0]).name if received else None)
        print(text, file=sys.stderr, flush=True)
    if failed:
        killed = cleanup.end_job_processes(job_env[cleanup.JOB_ENV])
        if killed:
            print(f"hvliterun: killed {len(killed)} leftover process(es) of the job: "
                  f"{' '.join(map(str, killed))}", file=sys.stderr, flush=True)
    removed = cleanup.clean_shm(shm_before)
    if removed:
        print(f"hvliterun: removed {len(removed)} shared-memory file(s) left in /dev/shm: "
              f"{' '.join(os.path.basename(p) for p in removed)}", file=sys.stderr, flush=True)
    return status
