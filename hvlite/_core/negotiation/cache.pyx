"""Response cache. Every rank holds the same slots: only rank 0 picks a slot (a free one, else
the least recently used), and every rank applies rank 0's choice from the broadcast responses.
"""
# distutils: language = c++
from cython.operator cimport dereference as deref
from hvlite._core.request cimport *
from hvlite._core.codes cimport *


cdef void cache_init(Cache* c, int capacity) noexcept nogil:
    c.capacity = capacity
    c.slot_of.clear()
    c.names.assign(capacity, string())
    c.metas.resize(capacity)
    c.last_used.assign(capacity, -1)


cdef bint cacheable(int collective) noexcept nogil:
    """Collectives whose whole metadata repeats from call to call. Allgather's first dimension
    may differ by rank: its slot holds rank 0's, so a rank whose own differs finds it stale and
    goes to rank 0 again (as with no cache); equal first dimensions, the usual case, hit. A
    barrier needs nothing but the agreement: cached, it is one exchange."""
    return (collective == C_ALLREDUCE or collective == C_BROADCAST or collective == C_REDUCESCATTER
            or collective == C_ALLGATHER or collective == C_BARRIER)


cdef bint _same_shape(const Meta& a, const Meta& b) noexcept nogil:
    cdef size_t i
    if a.shape.size() != b.shape.size():
        return False
    for i in range(a.shape.size()):
        if a.shape[i] != b.shape[i]:
            return False
    return True


cdef bint same_meta(const Meta& a, const Meta& b) noexcept nogil:
    return (a.collective == b.collective and a.dtype == b.dtype and a.op == b.op and
            a.root == b.root and a.algorithm == b.algorithm and _same_shape(a, b) and
            a.error.empty() and b.error.empty())


cdef int cache_lookup(Cache* c, const string& name, const Meta& meta) noexcept nogil:
    if c.capacity == 0:
        return -1
    it = c.slot_of.find(name)
    if it == c.slot_of.end():
        return -1
    cdef int slot = deref(it).second
    if same_meta(c.metas[slot], meta):
        return slot
    return -2 - slot


cdef void cache_evict(Cache* c, int slot) noexcept nogil:
    if not c.names[slot].empty():
        c.slot_of.erase(c.names[slot])
        c.names[slot] = string()


cdef void cache_put(Cache* c, int slot, const string& name, const Meta& meta) noexcept nogil:
    cache_evict(c, slot)
    it = c.slot_of.find(name)
    if it != c.slot_of.end():
        cache_evict(c, deref(it).second)
    c.names[slot] = name
    c.metas[slot] = meta
    c.slot_of[name] = slot


cdef int cache_pick_slot(Cache* c) noexcept nogil:
    cdef int s, best = 0
    for s in range(c.capacity):
        if c.names[s].empty():
            return s
        if c.last_used[s] < c.last_used[best]:
            best = s
    return best
