from mpi4py.libmpi cimport MPI_Comm

cdef int mpi_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm) noexcept nogil
