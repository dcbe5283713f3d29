# The response cache: tensor names whose metadata every rank has agreed on, each in a numbered
# slot, so later rounds agree on them through one bit per slot instead of sending names again.
# A name may hold several slots, one per metadata it was agreed with (its variants): a loop
# whose k-th unnamed call changes shape from step to step, or a named tensor whose shape
# alternates, hits as soon as each variant has been agreed once.
from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from hvlite._core.request cimport Meta

cdef cppclass Cache:
    int capacity
    unordered_map[string, vector[int]] slot_of     # name -> its variants' slots
    vector[string] names        # by slot; "" when free
    vector[Meta] metas
    vector[int64_t] last_used   # rank 0's LRU clock (round number)

cdef void cache_init(Cache* c, int capacity) noexcept nogil
cdef bint cacheable(int collective) noexcept nogil
cdef bint same_meta(const Meta& a, const Meta& b) noexcept nogil
# >= 0: the slot of the variant with equal metadata; -1: none (a miss); STALE: a miss that must
# drop the name's every variant on every rank at once (a poisoned request, an allgather or
# alltoall whose rows differ from rank 0's)
cdef enum:
    STALE = -2
cdef int cache_lookup(Cache* c, const string& name, const Meta& meta) noexcept nogil
cdef const vector[int]* cache_variants(Cache* c, const string& name) noexcept nogil
cdef void cache_put(Cache* c, int slot, const string& name, const Meta& meta) noexcept nogil
cdef void cache_evict(Cache* c, int slot) noexcept nogil
cdef int cache_pick_slot(Cache* c) noexcept nogil      # rank 0: a free slot, else the LRU one
