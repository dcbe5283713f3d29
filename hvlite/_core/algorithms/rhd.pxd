from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.algorithms.algorithm cimport Scratch

cdef int rhd_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                       Scratch* s) noexcept nogil
# Out of place (input NULL: in place), without copying input over first where N is a power of
# two.
cdef int rhd_allreduce_from(const char* input, char* buf, size_t count, int dtype, int op,
                            MPI_Comm comm, Scratch* s) noexcept nogil
