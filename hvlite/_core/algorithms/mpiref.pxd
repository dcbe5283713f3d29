from mpi4py.libmpi cimport MPI_Comm

cdef int mpi_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm) noexcept nogil
from mpi4py.libmpi cimport MPI_Datatype, MPI_Op
cdef int ensure_half_ops() noexcept nogil
cdef MPI_Datatype mpi_type(int dt) noexcept nogil
cdef MPI_Op mpi_op(int dt, int op) noexcept nogil
