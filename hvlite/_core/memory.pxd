# Results the coordinator allocates (allgather, alltoall): the caller's new array owns them, and
# its first touch of every page is a page fault. From 4 MiB the 2 MiB-aligned interior is
# advised into transparent huge pages, as NumPy does for its own arrays: a 128 MiB result took
# 25 ms of 4 KiB faults against 3 ms (2 ranks, docs/benchmarks.md). Freed with free().
from libc.stdlib cimport malloc
from libc.stdint cimport uintptr_t

cdef extern from "<sys/mman.h>" nogil:
    int madvise(void* addr, size_t length, int advice)
    enum: MADV_HUGEPAGE

cdef enum:
    HUGE_PAGE = 2 << 20
    HUGE_MIN = 4 << 20


cdef inline char* result_alloc(size_t nbytes) noexcept nogil:
    """malloc(nbytes + 1) (never NULL for 0 bytes), huge pages advised for large results."""
    cdef char* p = <char*>malloc(nbytes + 1)
    cdef uintptr_t lo, hi
    if p != NULL and nbytes >= HUGE_MIN:
        lo = (<uintptr_t>p + HUGE_PAGE - 1) & ~(<uintptr_t>HUGE_PAGE - 1)
        hi = (<uintptr_t>p + nbytes) & ~(<uintptr_t>HUGE_PAGE - 1)
        if hi > lo:
            madvise(<void*>lo, hi - lo, MADV_HUGEPAGE)     # advice only: failure changes nothing
    return p


cdef inline char* result_into(char* into, size_t into_bytes, size_t nbytes) noexcept nogil:
    """Where a result of nbytes goes: `into` (a pooled array the caller passed) when it is
    exactly that long and not empty (equal bytes of one agreed row size are equal rows), else a
    new allocation. The caller must not free `into` (the request's result_given says so)."""
    if into != NULL and nbytes > 0 and into_bytes == nbytes:
        return into
    return result_alloc(nbytes)
