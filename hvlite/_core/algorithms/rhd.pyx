"""Recursive halving-doubling all-reduce (Rabenseifner): reduce-scatter by recursive halving,
allgather by recursive doubling.

Cost (N ranks, n bytes, p = largest power of two <= N):
2 log2(p) α + 2((p-1)/p) nβ + ((p-1)/p) nγ, plus 2(α + nβ) + nγ when N is not a power of two.
Non-powers of two fold in first: of the first 2(N-p) ranks, each even rank hands its whole buffer
to the odd rank above it and sits out; the p remaining ranks run the power-of-two algorithm; the
odd ranks hand the result back at the end. The vector is cut into p blocks; halving keeps the
lower half when the current bit of the (new) rank is 0.

Steps go from the nearest partner out (bit 0 first; the allgather undoes them in reverse): with
ranks placed host by host, neighbours share a host, so the exchanges of half and of the whole
vector stay within it and only the small far ones cross the network (per host n/2 across rather
than n for 2 ranks per host). New rank k ends owning block bitreverse(k); each block is reduced
on one rank and copied everywhere, so every rank still gets the same bits.
"""
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from libc.string cimport memcpy
from hvlite._core.kernels.reduce cimport divide_by
from hvlite._core.algorithms.p2p cimport (block_start, comm_size, fold_in, fold_out, pow2_floor, sendrecv,
                               sendrecv_reduce_from, unfolded_rank)


cdef int rhd_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                       Scratch* s) noexcept nogil:
    return rhd_allreduce_from(NULL, buf, count, dtype, op, comm, s)


cdef int rhd_allreduce_from(const char* input, char* buf, size_t count, int dtype, int op,
                            MPI_Comm comm, Scratch* s) noexcept nogil:
    """input NULL: in place in buf. Otherwise out of place: the first halving step sends from
    input and reduces into the half of buf it keeps, taking input's elements segment by segment
    (every later step stays in that half; the allgather fills the rest). Non-powers of two fold
    whole buffers first, so there input is copied over at the start."""
    cdef int n = comm_size(comm), err = 0
    cdef size_t es = dtype_size(dtype)
    cdef int p = pow2_floor(n), newrank, mask, partner
    cdef size_t lo, sz, klo, khi, slo, a, b
    cdef const char* first = input
    if input != NULL and (n == 1 or p != n):
        memcpy(buf, input, count * es)
        first = NULL
    if n == 1:
        if s.divisor > 1:
            divide_by(buf, count, dtype, s.divisor)
        return 0
    err = fold_in(buf, count, dtype, op, comm, s, &newrank)
    if err:
        return err
    if newrank >= 0:
        # Reduce-scatter by recursive halving over block indices [lo, lo + sz), nearest partner
        # first: the step at distance 1 moves half the vector, the one at p/2 a 1/p share.
        lo = 0
        sz = p
        mask = 1
        while mask < p:
            partner = unfolded_rank(newrank ^ mask, n)
            sz >>= 1
            if newrank & mask:
                klo, slo = lo + sz, lo
            else:
                klo, slo = lo, lo + sz
            a = block_start(count, p, slo)
            b = block_start(count, p, slo + sz)
            err = sendrecv_reduce_from(
                (first if first != NULL else <const char*>buf) + a * es, b - a, partner,
                first + block_start(count, p, klo) * es if first != NULL else NULL,
                buf + block_start(count, p, klo) * es,
                block_start(count, p, klo + sz) - block_start(count, p, klo),
                partner, dtype, op, comm, s)
            first = NULL
            if err:
                return err
            lo = klo
            mask <<= 1
        if s.divisor > 1:       # an Average: this rank's blocks, before the allgather copies them
            a = block_start(count, p, lo)
            divide_by(buf + a * es, block_start(count, p, lo + sz) - a, dtype, s.divisor)
        # Allgather by recursive doubling, the same steps backwards: the partner of each step
        # holds the sibling run of `sz` blocks; the last, largest exchange is at distance 1.
        mask = p >> 1
        while mask > 0:
            partner = unfolded_rank(newrank ^ mask, n)
            slo = lo ^ sz
            a = block_start(count, p, lo)
            b = block_start(count, p, lo + sz)
            klo = block_start(count, p, slo)
            khi = block_start(count, p, slo + sz)
            err = sendrecv(buf + a * es, (b - a) * es, partner, buf + klo * es, (khi - klo) * es,
                           partner, comm)
            if err:
                return err
            lo = lo if lo < slo else slo
            sz <<= 1
            mask >>= 1
    return fold_out(buf, count * es, comm)
