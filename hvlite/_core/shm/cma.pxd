from libc.stdint cimport uint64_t
from hvlite._core.shm.segment cimport ShmArea, ShmPiece

# A peer's output arena (shm/arena.pyx) as this rank sees it: mapped at `map` (NULL: not mapped),
# at `base` in the peer's own address space, `cap` bytes long; `mapped`: a bit per page, set
# once the page is in this process's page tables (shm/cma.pyx, _ready; NULL: not tracked).
cdef struct OutMap:
    char* map
    uint64_t base
    size_t cap
    unsigned char* mapped

# A batch's all-reduce on one node through the peers' own buffers (see shm/cma.pyx): 0 done,
# 1 take the slot path instead (the same on every rank), or an error code. `op` is a kernel op.
# divisor > 1: each result chunk divided before it goes out (Average's last pass, fused).
cdef int shm_direct_allreduce(const ShmPiece* p, size_t np, size_t count, int dtype, int op,
                              ShmArea* a, OutMap* maps, long divisor) noexcept nogil
# Whether a batch of nbytes is large enough for the direct way at all (below, it returns 1).
cdef bint direct_worth(ShmArea* a, size_t nbytes) noexcept nogil
# Collective over the node: 1 when this rank can read every peer's memory.
cdef int direct_probe(ShmArea* a) noexcept nogil
# A context that uses cross-memory attach holds this: where Yama's scope 1 requires it and
# `allowed`, it opens the process to `peer` (a pid: the context's one other rank) or, where
# contexts have more peers or other ones (peer 0), to any process of its user
# (PR_SET_PTRACER_ANY); the last release closes it again.
cdef void ptracer_hold(bint allowed, long peer) noexcept nogil
cdef void ptracer_release() noexcept nogil
# nbytes of process pid's memory at `src` (an address there) into dst, through the kernel:
# 0, or HV_ERR_SHM where the kernel refuses (a bad address reads nothing past dst's nbytes).
cdef int cma_read(long long pid, char* dst, uint64_t src, size_t nbytes) noexcept nogil
# The last barrier of a call that reached into its peers: `err` is this rank's outcome; returns
# it, or HV_ERR_SHM on every rank where a peer's failed, or the barrier's own error (a lost peer).
# No rank goes on alone after a read or write another rank could not make.
cdef int cma_agree(ShmArea* a, int err) noexcept nogil
