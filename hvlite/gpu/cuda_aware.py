"""Can the MPI library read device memory? Asked of the library, overridable by the user.

MPICH (4.0 and later) and Open MPI both export `MPIX_Query_cuda_support()`, which says whether
CUDA support is available at run time (Open MPI) or enabled (MPICH). mpi4py has no query of its
own, so the symbol is looked up with ctypes in the process's loaded libraries; a library
without the symbol is taken as not CUDA-aware. HVLITE_CUDA_AWARE=1/0 overrides the answer (1 on
a library that is not CUDA-aware makes MPI read device pointers as host memory: a crash).
"""
import ctypes
import functools
import os


@functools.lru_cache(maxsize=None)
def query_library():
    """(answer, why): the library's own answer, or False and why not."""
    for lib in _candidates():
        try:
            f = getattr(lib, "MPIX_Query_cuda_support")
        except AttributeError:
            continue
        f.restype, f.argtypes = ctypes.c_int, []
        yes = bool(f())
        return yes, f"MPIX_Query_cuda_support() returned {int(yes)}"
    return False, "the MPI library has no MPIX_Query_cuda_support"


def _candidates():
    yield ctypes.CDLL(None)             # whatever the process loaded with global symbols
    seen = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                name = os.path.basename(path)
                if name.startswith("libmpi") and ".so" in name and path not in seen:
                    seen.add(path)
                    yield ctypes.CDLL(path)
    except OSError:
        pass


def decide(setting, query=query_library):
    """(cuda_aware, why) from the HVLITE_CUDA_AWARE setting ("auto", "1", "0")."""
    if setting == "1":
        return True, "HVLITE_CUDA_AWARE=1"
    if setting == "0":
        return False, "HVLITE_CUDA_AWARE=0"
    return query()
