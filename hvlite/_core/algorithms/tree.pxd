from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.algorithms.algorithm cimport Scratch

cdef int tree_reduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                     Scratch* s) noexcept nogil
cdef int tree_broadcast(char* buf, size_t nbytes, MPI_Comm comm) noexcept nogil
cdef int tree_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                        Scratch* s) noexcept nogil
