"""The round's agreement: one all-reduce of the round message by recursive doubling over
point-to-point, with small all-reduces riding along.

The message is [ready | still-valid | flags] words, ANDed (negotiation/wire.pxd), then a region where every
cached all-reduce small enough has a fixed place (the layout follows the cache, which is the
same on every rank). A rank copies the input of each such request it has ready into its place;
where both sides of an exchange have the slot ready, its data are reduced with its own dtype
and op. So when a slot comes out ready on every rank its result is already in the message: a
small synchronous all-reduce costs one exchange per doubling step instead of an agreement and
then an all-reduce (two latencies). Both partners of a step combine in one canonical order (the
lower rank's data on the left, as algorithms/rd.pyx), so every rank holds the same bits.

Why not MPI_Iallreduce(BAND) for the bits alone: MPI's non-blocking schedule costs more than a
point-to-point exchange at these sizes, and it cannot carry data reduced with another op.
Non-powers of two fold in and out as algorithms/p2p.pyx does. On one node with the shared segment the
coordinator ANDs the bits through the segment instead (shm/segment.pyx): nothing rides there.
"""
from libc.string cimport memcpy
from libc.stdint cimport uint64_t
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.kernels.reduce cimport reduce_into
from hvlite._core.liveness cimport wait_all
from hvlite._core.algorithms.p2p cimport comm_size, comm_rank, pow2_floor, unfolded_rank

cdef enum:
    TAG_AGREE = 0x4857


cdef int _exchange(char* mine, int dest, char* theirs, int src, size_t nbytes,
                   MPI_Comm comm) noexcept nogil:
    """Send `mine` to dest and receive `theirs` from src, nbytes each (either peer may be
    MPI_PROC_NULL); waits patiently: the peer may not have reached this round yet."""
    cdef MPI_Request req[2]
    cdef int err = 0
    req[0] = MPI_REQUEST_NULL
    req[1] = MPI_REQUEST_NULL
    if src != MPI_PROC_NULL:
        err = MPI_Irecv(theirs, <int>nbytes, MPI_BYTE, src, TAG_AGREE, comm, &req[0])
    if not err and dest != MPI_PROC_NULL:
        err = MPI_Isend(mine, <int>nbytes, MPI_BYTE, dest, TAG_AGREE, comm, &req[1])
    if err:
        return err
    return wait_all(2, req, True)


cdef void _combine(char* acc, const char* other, bint acc_lower, int nwords,
                   const Ride* rides, int nrides) noexcept nogil:
    """acc = (lower side) op (upper side): rides first (while both sides' bits are known),
    then the bits."""
    cdef uint64_t* a = <uint64_t*>acc
    cdef const uint64_t* o = <const uint64_t*>other
    cdef char* region = acc + 8 * nwords
    cdef const char* oregion = other + 8 * nwords
    cdef int k, s
    cdef size_t nbytes
    for k in range(nrides):
        s = rides[k].slot
        if not ((a[s >> 6] & o[s >> 6]) >> (s & 63)) & 1:
            continue
        if acc_lower:
            reduce_into(region + rides[k].offset, oregion + rides[k].offset, rides[k].count,
                        rides[k].dtype, rides[k].op)
        else:       # upper op= lower would put the operands the other way round: copy back
            nbytes = rides[k].count * dtype_size(rides[k].dtype)
            reduce_into(<char*>oregion + rides[k].offset, region + rides[k].offset,
                        rides[k].count, rides[k].dtype, rides[k].op)
            memcpy(region + rides[k].offset, oregion + rides[k].offset, nbytes)
    for k in range(nwords):
        a[k] &= o[k]


cdef int agree(MPI_Comm comm, char* msg, char* other, int nwords, size_t rbytes,
               const Ride* rides, int nrides) noexcept nogil:
    cdef int n = comm_size(comm), r = comm_rank(comm), p = pow2_floor(n), rem, newrank, mask
    cdef int partner, err
    cdef size_t nbytes = 8 * <size_t>nwords + rbytes
    if n == 1:
        return 0
    rem = n - p
    # fold in: of the first 2*rem ranks, each even one hands its message to the odd one above
    # and sits out until the result comes back
    if r < 2 * rem and r % 2 == 0:
        err = _exchange(msg, r + 1, NULL, MPI_PROC_NULL, nbytes, comm)
        if not err:
            err = _exchange(NULL, MPI_PROC_NULL, msg, r + 1, nbytes, comm)
        return err
    if r < 2 * rem:
        err = _exchange(NULL, MPI_PROC_NULL, other, r - 1, nbytes, comm)
        if err:
            return err
        _combine(msg, other, False, nwords, rides, nrides)
        newrank = r // 2
    else:
        newrank = r - rem
    mask = 1
    while mask < p:
        partner = unfolded_rank(newrank ^ mask, n)
        err = _exchange(msg, partner, other, partner, nbytes, comm)
        if err:
            return err
        _combine(msg, other, newrank < (newrank ^ mask), nwords, rides, nrides)
        mask <<= 1
    if r < 2 * rem:     # fold out
        return _exchange(msg, r - 1, NULL, MPI_PROC_NULL, nbytes, comm)
    return 0
