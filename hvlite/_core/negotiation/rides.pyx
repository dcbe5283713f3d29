"""Small all-reduces that ride in the round's agreement message: the region's layout (from the
response cache, so the same on every rank), boarding this rank's inputs, and landing the results
once agree.pyx has reduced them along with the round's bits."""
# distutils: language = c++
from libc.string cimport memcpy
from hvlite._core.request cimport *
from hvlite._core.codes cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.kernels.reduce cimport finish_op, kernel_op
from hvlite._core.negotiation.agree cimport agree


cdef void rides_init(Rides* r, int nwords, int capacity, size_t budget) noexcept nogil:
    r.nwords = nwords
    r.budget = budget
    r.at.assign(capacity, -1)
    r.dirty = True
    r.region_bytes = 0


cdef bint may_ride(const Meta& m) noexcept nogil:
    return (m.collective == C_ALLREDUCE and m.algorithm == ALG_AUTO and m.error.empty()
            and 0 <= m.dtype < DT_COUNT and 0 <= m.op < OP_COUNT and m.op != OP_ADASUM
            and item_count(m) > 0)


cdef void rides_layout(Rides* r, Cache* cache) noexcept nogil:
    cdef Ride ride
    cdef size_t nbytes, off = 0
    cdef int s
    r.rides.clear()
    for s in range(cache.capacity if r.budget else 0):     # none ride: no scan
        r.at[s] = -1
        if cache.names[s].empty() or not may_ride(cache.metas[s]):
            continue
        nbytes = item_count(cache.metas[s]) * dtype_size(cache.metas[s].dtype)
        if off + nbytes > r.budget:
            continue
        ride.slot = s
        ride.offset = off
        ride.count = item_count(cache.metas[s])
        ride.dtype = cache.metas[s].dtype
        ride.op = kernel_op(cache.metas[s].op)
        r.at[s] = <int>r.rides.size()
        r.rides.push_back(ride)
        off += (nbytes + 7) // 8 * 8
    r.region_bytes = off
    r.msg.assign(r.nwords + off // 8, 0)
    r.other.assign(r.nwords + off // 8, 0)
    r.dirty = False


cdef void rides_board(Rides* r, int k, const char* input) noexcept nogil:
    memcpy(<char*>r.msg.data() + 8 * r.nwords + r.rides[k].offset, input,
           r.rides[k].count * dtype_size(r.rides[k].dtype))


cdef int rides_agree(Rides* r, MPI_Comm comm, uint64_t* bits) noexcept nogil:
    cdef int err
    memcpy(r.msg.data(), bits, 8 * <size_t>r.nwords)
    err = agree(comm, <char*>r.msg.data(), <char*>r.other.data(), r.nwords, r.region_bytes,
                r.rides.data(), <int>r.rides.size())
    memcpy(bits, r.msg.data(), 8 * <size_t>r.nwords)
    return err


cdef void rides_landed(Rides* r, Item* it, long size) noexcept nogil:
    cdef Ride* ride = &r.rides[it.ride]
    it.start = it.packed = hv_now()
    if it.req != NULL:
        memcpy(it.req.output, <char*>r.msg.data() + 8 * r.nwords + ride.offset,
               ride.count * dtype_size(ride.dtype))
        finish_op(it.req.output, ride.count, ride.dtype, it.meta.op, size)
        it.req.algorithm_used = ALG_RD
    it.ran = it.unpacked = hv_now()
    it.err = 0
