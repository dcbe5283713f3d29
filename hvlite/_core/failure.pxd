from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from hvlite._core.request cimport Request, Item

# "allreduce 'name'", the name escaped (negotiation/describe.pyx).
cdef string label(int collective, const string& name) noexcept nogil
# What a round waits on, for a lost-rank message (built only then): items[at] when at >= 0, the
# fused all-reduces when at == -2, else the names it negotiates for (pending).
cdef string doing(vector[Item]* items, int at, unordered_map[string, Request*]& pending) noexcept nogil
# This rank failed to allocate `nbytes` for `it`: the text every peer is told.
cdef string out_of_memory(const Item* it, int64_t nbytes, int rank) noexcept nogil
# A peer is gone while this rank waited in `doing`: it told why (fail_text), or it went silent
# for `silence` seconds.
cdef string peer_failed(int rank, const string& doing, const string& fail_text) noexcept nogil
cdef string peer_lost(int rank, double silence, const string& doing) noexcept nogil
# Rank 0 answered that these ranks called shutdown() before a collective completed.
cdef string shut_down(vector[int64_t]& stopping) noexcept nogil
# Rank 0's response could not be read (a field at byte `off` of `n`).
cdef string malformed_response(size_t off, size_t n) noexcept nogil
