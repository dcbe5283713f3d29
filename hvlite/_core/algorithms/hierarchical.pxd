from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.algorithms.algorithm cimport Scratch, allreduce_fn

cdef int hierarchical_allreduce(char* buf, size_t count, int dtype, int op,
                                MPI_Comm local, MPI_Comm cross, bint uniform,
                                allreduce_fn cross_fn, Scratch* s) noexcept nogil
