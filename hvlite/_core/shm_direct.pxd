from hvlite._core.shm cimport ShmArea, ShmPiece

# A batch's all-reduce on one node through the peers' own buffers (see shm_direct.pyx): 0 done,
# 1 take the slot path instead (the same on every rank), or an error code. `op` is a kernel op.
cdef int shm_direct_allreduce(const ShmPiece* p, size_t np, size_t count, int dtype, int op,
                              ShmArea* a) noexcept nogil
# Collective over the node: 1 when this rank can read every peer's memory.
cdef int direct_probe(ShmArea* a) noexcept nogil
