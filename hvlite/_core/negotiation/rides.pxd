from libc.stdint cimport uint64_t
from libcpp.vector cimport vector
from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.request cimport Meta, Item
from hvlite._core.negotiation.agree cimport Ride
from hvlite._core.negotiation.cache cimport Cache

# The round's agreement message, [nwords bits | region]: every slot's votes and the flags, then
# the small cached all-reduces that ride in it (agree.pyx ANDs the bits and reduces the rides).
cdef cppclass Rides:
    int nwords
    size_t budget               # the region's room (0: none ride)
    vector[Ride] rides          # the layout: the same on every rank, as it follows the cache
    vector[int] at              # by slot: its ride, or -1
    bint dirty                  # the cache may have changed: lay out again before the next round
    size_t region_bytes
    vector[uint64_t] msg, other

cdef void rides_init(Rides* r, int nwords, int capacity, size_t budget) noexcept nogil
# An all-reduce that may ride: left to auto, an op the kernels run (Adasum has its own
# algorithm), not empty.
cdef bint may_ride(const Meta& m) noexcept nogil
# Places in the region for the cached all-reduces that fit, in slot order.
cdef void rides_layout(Rides* r, Cache* cache) noexcept nogil
# This rank's input of a ready riding all-reduce, into its place in the message.
cdef void rides_board(Rides* r, int k, const char* input) noexcept nogil
# The round's agreement of `bits` (nwords words) with the rides: an MPI or HV_ERR_* code.
cdef int rides_agree(Rides* r, MPI_Comm comm, uint64_t* bits) noexcept nogil
# A riding all-reduce ready everywhere: its result, from the agreed message into its output
# (a joined rank, req NULL, has none), Average divided by `size`.
cdef void rides_landed(Rides* r, Item* it, long size) noexcept nogil
