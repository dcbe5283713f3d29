"""The code tables of codes.h as Python tuples, and the one choke point that turns a code into
text and an error kind into an exception (mpi4py's CHKERR is the model): every handle, the
engine and the parameter server raise through `exception()` / `check()`.

Importing this module does not start MPI (it calls MPI_Error_string only for a real MPI code)."""
from mpi4py.libmpi cimport MPI_Error_string, MPI_SUCCESS, MPI_MAX_ERROR_STRING
from mpi4py.libmpi cimport MPI_Initialized, MPI_Get_library_version
from libc.string cimport strlen, memcpy


class Names(tuple):
    """One code table: names by code (ALGORITHMS[2]) and codes by name (ALGORITHMS.code("ring"))."""

    def __new__(cls, names):
        self = super().__new__(cls, names)
        self._codes = {name: code for code, name in enumerate(self)}
        return self

    def code(self, name, default=None):
        """The code of `name`, or `default` when the table has no such name."""
        try:
            return self._codes.get(name, default)
        except TypeError:       # unhashable: no such name
            return default


cdef object _table(const char* const* names, int count):
    return Names(names[i].decode() for i in range(count))


COLLECTIVES = _table(HV_COLLECTIVE_NAMES, C_COUNT)
DTYPES = _table(HV_DTYPE_NAMES, DT_COUNT)
DTYPE_SIZES = tuple(HV_DTYPE_SIZES[i] for i in range(DT_COUNT))
OPS = _table(HV_OP_NAMES, OP_COUNT)
ALGORITHMS = _table(HV_ALGORITHM_NAMES, ALG_COUNT)
SHM_WAYS = _table(HV_SHM_WAY_NAMES, WAY_COUNT)
ERROR_KINDS = _table(HV_ERROR_KIND_NAMES, E_COUNT)
OWN_ERRORS = {HV_ERR_NOMEM: "NOMEM", HV_ERR_SHM: "SHM", HV_ERR_COUNT: "COUNT",
              HV_ERR_TIMEOUT: "TIMEOUT", HV_ERR_LOST: "LOST", HV_ERR_DESYNC: "DESYNC",
              HV_ERR_SHM_TABLE: "SHM_TABLE", HV_MISMATCH: "MISMATCH"}
PENDING, DONE, ERROR = ST_PENDING, ST_DONE, ST_ERROR


cdef int error_text(int code, char* buf, int cap) noexcept nogil:
    cdef const char* own = hv_own_error_text(code)
    cdef int n = 0
    cdef char tmp[MPI_MAX_ERROR_STRING + 1]
    if own != NULL:
        n = <int>strlen(own)
        n = n if n < cap else cap
        memcpy(buf, own, n)
        return n
    if MPI_Error_string(code, tmp, &n) != MPI_SUCCESS:
        return 0
    n = n if n < cap else cap
    memcpy(buf, tmp, n)
    return n


cdef size_t _nomem_bytes = 0


cdef int nomem(size_t nbytes) noexcept nogil:
    global _nomem_bytes
    _nomem_bytes = nbytes
    return HV_ERR_NOMEM


cdef size_t nomem_bytes() noexcept nogil:
    return _nomem_bytes


def core_mpi():
    """(initialized, library version's first line) of the MPI this core is linked to, asked
    through its own binding: where that is not the library mpi4py loaded and initialised, the
    runtime says so instead of letting the core call an MPI that was never started."""
    cdef int flag = 0, n = 0
    # sized for any MPI, not by this build's header: the library answering may be another
    # (Open MPI's header says 256, MPICH writes up to 8192)
    cdef char buf[16384]
    MPI_Initialized(&flag)
    if MPI_Get_library_version(buf, &n) != MPI_SUCCESS:
        n = 0
    n = n if 0 <= n < <int>sizeof(buf) else 0
    text = buf[:n].decode("utf-8", "replace").strip()
    return bool(flag), (text.splitlines()[0].strip() if text else "unknown")


def error_string(int code):
    """hvlite's text for its own codes, MPI's for MPI's."""
    cdef char buf[MPI_MAX_ERROR_STRING + 1]
    cdef int n = error_text(code, buf, MPI_MAX_ERROR_STRING)
    if n == 0:
        return f"unknown error code {code}"
    return buf[:n].decode("utf-8", "replace")


def exception(int kind, message, int code=0):
    """The exception for a request that ended with error `kind` (and, for E_MPI, `code`)."""
    from hvlite import errors
    if kind == E_MPI:
        return errors.MPIError(code, message if message else error_string(code))
    cls = {E_MISMATCH: errors.MismatchError, E_SHUTDOWN: errors.ShutdownError,
           E_STALL: errors.StallError, E_LOST: errors.LostRankError,
           E_DUPLICATE: errors.DuplicateNameError, E_FAILED: errors.RankFailedError}.get(kind, errors.InvalidArgumentError)
    return cls(message)


cdef int check(int err, what=None) except -1:
    """CHKERR: raise MPIError for a non-zero code (MPI's or hvlite's own), naming `what`."""
    if err == 0:
        return 0
    from hvlite.errors import MPIError
    text = error_string(err)
    raise MPIError(err, f"{text} ({what})" if what else text)


def raise_for_code(int err):
    """Raise what the core raises for this code (tests use it with MPI's error classes)."""
    check(err)
