"""A rank of hvlite.run.run(): load the pickled function from the call's directory, run it, and
write this rank's return value there (atomically: a file that exists is whole)."""
import os
import pickle
import stat
import sys

from hvlite.run.api import PAYLOAD


def _rank():
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    from mpi4py import MPI
    return MPI.COMM_WORLD.Get_rank()


def _checked(work):
    """The call's directory and payload, if they are what run() made: a directory (not a link)
    and a file of this user's alone. On a host that does not share the caller's /tmp the
    directory named on the command line may not exist, and another user could make it there
    and plant a payload that this rank would unpickle (run code): refused instead."""
    st = os.lstat(work)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise SystemExit(f"hvlite.run: {work} is not the call's private directory (a directory "
                         f"of user {os.geteuid()}, mode 0700; found mode "
                         f"{stat.S_IMODE(st.st_mode):04o}, user {st.st_uid}): not loading a "
                         "payload from it. Do the hosts share this path?")
    fd = os.open(os.path.join(work, PAYLOAD), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    f = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        f.close()
        raise SystemExit(f"hvlite.run: {work}/{PAYLOAD} is not the caller's payload: not loaded")
    return f


def main(work):
    with _checked(work) as f:
        func, args, kwargs = pickle.load(f)      # written by the caller, in its own 0700 dir
    result = func(*args, **kwargs)
    rank = _rank()
    path = os.path.join(work, f"result.{rank}")
    with open(path + ".tmp", "wb") as f:
        pickle.dump(result, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main(sys.argv[1])
