from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.algorithms.algorithm cimport Scratch

cdef int rd_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                      Scratch* s) noexcept nogil
