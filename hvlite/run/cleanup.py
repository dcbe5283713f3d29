"""What a failed job can leave on this host, and hvliterun's removal of it afterwards.

* Processes: every rank gets HVLITE_RUN_JOB=<token> (one token per hvliterun); after a failed
  job, a process of this user whose environment still carries the token (a rank, or a child it
  started, that outlived mpiexec) is given a moment to go, then killed.
* /dev/shm: MPICH's ch4 shared-memory slab (`mpich_shm_<world id>_<node>`, and
  `mpich_vci_<world id>_<node>`) is unlinked by MPI_Finalize, so a rank killed mid-job leaves it
  behind; UCX's `ucx_shm_posix_*` and hvlite's own `hvlite-<pid>-<n>-<host>-<random>` segments
  are unlinked as soon as they are mapped. A file is removed only if it is new since the listing taken before the
  launch, is a regular file of this user, has one of those prefixes, and no live process maps it
  or holds it open (/proc/*/maps, /proc/*/fd).
"""
import os
import signal
import time

SHM = "/dev/shm"
JOB_ENV = "HVLITE_RUN_JOB"
SHM_PREFIXES = ("mpich_shm_", "mpich_vci_", "ucx_shm_posix_", "hvlite-")


def _pids():
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def job_processes(token):
    """Pids of this user's live processes whose environment has HVLITE_RUN_JOB=token."""
    if not token:
        return []
    needle = f"{JOB_ENV}={token}".encode()
    me, uid = os.getpid(), os.getuid()
    found = []
    for pid in _pids():
        if pid == me:
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[-1].split()[0]
        except (OSError, IndexError):
            continue
        if state != b"Z" and needle in env.split(b"\0"):
            found.append(pid)
    return found


def end_job_processes(token, grace=2.0):
    """Wait up to `grace` s for the job's leftover processes to go, then SIGKILL the rest.
    Returns the pids that had to be killed."""
    deadline = time.monotonic() + grace
    left = job_processes(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = job_processes(token)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 2.0
    while job_processes(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def shm_listing(root=SHM):
    """The names in /dev/shm now (None where there is no such directory)."""
    try:
        return set(os.listdir(root))
    except OSError:
        return None


def _in_use(paths):
    """The subset of `paths` some live process maps or holds open."""
    used = set()
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    parts = line.split(None, 5)
                    if len(parts) == 6:
                        path = parts[5].rstrip("\n")
                        if path in paths:
                            used.add(path)
        except OSError:
            pass
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target in paths:
                    used.add(target)
        except OSError:
            pass
    return used


def shm_candidates(before, root=SHM):
    """Paths of files new since `before` that are leftovers MPI or hvlite could have made."""
    after = shm_listing(root)
    if before is None or after is None:
        return []
    uid = os.getuid()
    found = []
    for name in sorted(after - before):
        if not name.startswith(SHM_PREFIXES):
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid == uid and os.path.isfile(path) and not os.path.islink(path):
            found.append(path)
    return found


def clean_shm(before, root=SHM, wait=1.0):
    """Remove this job's leftovers in /dev/shm (see the module docstring); a file still in use
    is given up to `wait` s to be let go. Returns the removed paths."""
    candidates = shm_candidates(before, root)
    removed = []
    deadline = time.monotonic() + wait
    while candidates:
        busy = _in_use(set(candidates))
        for path in candidates:
            if path not in busy:
                try:
                    os.unlink(path)
                    removed.append(path)
                except OSError:
                    pass
        candidates = [p for p in candidates if p in busy]
        if not candidates or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return removed
