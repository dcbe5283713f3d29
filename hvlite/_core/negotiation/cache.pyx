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
    """Collectives whose whole metadata repeats from call to call. Allgather's and alltoall's
    first dimension may differ by rank: the slot holds rank 0's, so a rank whose own differs
    finds it stale and goes to rank 0 again (as with no cache); equal first dimensions, the
    usual case, hit (alltoall's splits are not metadata: they travel with the data). A barrier
    needs nothing but the agreement: cached, it is one exchange."""
    return (collective == C_ALLREDUCE or collective == C_BROADCAST or collective == C_REDUCESCATTER
            or collective == C_ALLGATHER or collective == C_ALLTOALL or collective == C_BARRIER)


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


cdef const vector[int]* cache_variants(Cache* c, const string& name) noexcept nogil:
    """The slots `name` holds (NULL: none)."""
    it = c.slot_of.find(name)
    if it == c.slot_of.end():
        return NULL
    return &deref(it).second


cdef int cache_lookup(Cache* c, const string& name, const Meta& meta) noexcept nogil:
    """A miss on a name with other variants is only a miss: the request goes to rank 0, which
    gives it a slot of its own once every rank has sent it. Were the ranks to disagree (a
    bug: one rank's k-th call differs), rank 0 sees the name pending while others hit one of
    its variants and drops them all (coordinator._conflicts), so the mismatch is reported."""
    if c.capacity == 0:
        return -1
    cdef const vector[int]* slots = cache_variants(c, name)
    if slots == NULL:
        return -1
    cdef size_t i
    for i in range(slots.size()):
        if same_meta(c.metas[deref(slots)[i]], meta):
            return deref(slots)[i]
    if not meta.error.empty() or meta.collective == C_ALLGATHER or meta.collective == C_ALLTOALL:
        return STALE
    return -1


cdef void cache_evict(Cache* c, int slot) noexcept nogil:
    cdef vector[int]* slots
    cdef size_t i
    if c.names[slot].empty():
        return
    it = c.slot_of.find(c.names[slot])
    if it != c.slot_of.end():
        slots = &deref(it).second
        for i in range(slots.size()):
            if deref(slots)[i] == slot:
                slots.erase(slots.begin() + i)
                break
        if slots.empty():
            c.slot_of.erase(it)
    c.names[slot] = string()


cdef void cache_put(Cache* c, int slot, const string& name, const Meta& meta) noexcept nogil:
    """Every rank applies rank 0's answers in one order, so every rank's cache stays the same."""
    cache_evict(c, slot)
    cdef const vector[int]* slots = cache_variants(c, name)
    cdef int old = -1
    cdef size_t i
    if slots != NULL:
        for i in range(slots.size()):
            if same_meta(c.metas[deref(slots)[i]], meta):
                old = deref(slots)[i]
    if old >= 0:
        cache_evict(c, old)
    c.names[slot] = name
    c.metas[slot] = meta
    c.slot_of[name].push_back(slot)


cdef int cache_pick_slot(Cache* c) noexcept nogil:
    cdef int s, best = 0
    for s in range(c.capacity):
        if c.names[s].empty():
            return s
        if c.last_used[s] < c.last_used[best]:
            best = s
    return best
