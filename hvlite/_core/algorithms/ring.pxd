from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.algorithms.algorithm cimport Scratch

cdef int ring_owned_block(int rank, int n) noexcept nogil
cdef int ring_reduce_scatter(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                             Scratch* s) noexcept nogil
cdef int ring_allgather(char* buf, size_t count, size_t esize, MPI_Comm comm) noexcept nogil
cdef int ring_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                        Scratch* s) noexcept nogil
cdef int ring_allreduce_from(const char* input, char* buf, size_t count, int dtype, int op,
                             MPI_Comm comm, Scratch* s) noexcept nogil
