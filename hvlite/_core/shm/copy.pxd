from libc.stdint cimport int64_t
from libcpp.vector cimport vector
from hvlite._core.shm.segment cimport ShmArea

# Collective over the node's ranks (the whole set); HV_ERR_LOST once a peer is lost.
cdef int shm_broadcast(ShmArea* a, char* buf, size_t nbytes, int root) noexcept nogil
cdef int shm_allgather(ShmArea* a, const char* input, int64_t rows, size_t row_bytes,
                       char** result, int64_t* total_rows, vector[int64_t]& all_rows,
                       bint same_rows) noexcept nogil
