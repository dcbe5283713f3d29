# Rank 0's view of the names some ranks have submitted and others not yet (controller and stall read it).
from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from hvlite._core.request cimport Meta

cdef cppclass Entry:
    vector[Meta] metas
    vector[char] have
    int count
    vector[int64_t] arrival     # the round in which each rank's submission arrived
    double first_seen
    int64_t order

cdef cppclass Table:
    unordered_map[string, Entry] entries
    int64_t next_order
    vector[char] joined
    vector[int64_t] join_time
    int64_t join_clock

cdef inline Meta first_meta(Entry* e, int n) noexcept nogil:
    """The metadata of the first rank that submitted (what the response carries)."""
    cdef int r
    for r in range(n):
        if e.have[r]:
            return e.metas[r]
    return e.metas[0]
