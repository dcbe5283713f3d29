from libc.stdint cimport int64_t
from libcpp.vector cimport vector
from mpi4py.libmpi cimport MPI_Comm

cdef int run_broadcast(MPI_Comm comm, char* buf, size_t nbytes, int root) noexcept nogil
cdef int run_alltoall(MPI_Comm comm, const char* input, int64_t rows, const vector[int64_t]& splits,
                      size_t row_bytes, char** result, vector[int64_t]* recv_splits, char* into,
                      size_t into_bytes) noexcept nogil
cdef int run_reducescatter(MPI_Comm comm, const char* input, char* output, int64_t rows,
                           size_t row_elems, int dtype, int op) noexcept nogil
cdef int64_t reducescatter_rows(int64_t rows, int size, int rank) noexcept nogil

from hvlite._core.request cimport Item
from hvlite._core.shm.segment cimport ShmArea
# node: the set's ranks are one node's, with a shared segment (else NULL): broadcast, allgather,
# alltoall and reducescatter go through it.
cdef int run_item(MPI_Comm comm, Item* it, ShmArea* node) noexcept nogil
