from libc.stdint cimport int64_t
from hvlite._core.shm.segment cimport ShmArea

# mpi_collectives' reducescatter among the node's ranks (the whole set), through the segment:
# `rows` rows of row_elems elements in, this rank's block of rows (Horovod's split) out.
# Collective over the node: 0, an error code (HV_ERR_LOST once a peer is lost), or HV_ERR_SHM
# before any exchange where a slot cannot hold a part per rank (then MPI's path, the same on every rank).
cdef int shm_reducescatter(ShmArea* a, const char* input, char* output, int64_t rows,
                           size_t row_elems, int dtype, int op) noexcept nogil
# Its parts for the other ranks, riding with the express round's vote of n words (segment.pxd's
# shm_preload) where every block fits one round beside it: what shm_reducescatter then looks
# for (shm_preloaded), or 0.
cdef size_t shm_reducescatter_carry(ShmArea* a, int n, const char* input, int64_t rows,
                                    size_t row_elems, int dtype) noexcept nogil
