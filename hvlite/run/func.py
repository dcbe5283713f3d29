"""A rank of hvlite.run.run(): load the pickled function from the call's directory, run it, and
write this rank's return value there (atomically: a file that exists is whole)."""
import os
import pickle
import sys

from hvlite.run.api import PAYLOAD


def _rank():
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    from mpi4py import MPI
    return MPI.COMM_WORLD.Get_rank()


def main(work):
    with open(os.path.join(work, PAYLOAD), "rb") as f:
        func, args, kwargs = pickle.load(f)      # written by the caller, in its own 0700 dir
    result = func(*args, **kwargs)
    rank = _rank()
    path = os.path.join(work, f"result.{rank}")
    with open(path + ".tmp", "wb") as f:
        pickle.dump(result, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main(sys.argv[1])
