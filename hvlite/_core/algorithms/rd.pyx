"""Recursive doubling all-reduce: log2(p) rounds, each exchanging and reducing the whole buffer.

Cost (N ranks, n bytes, p = largest power of two <= N):
⌈log2 p⌉(α + nβ + nγ), plus 2(α + nβ) + nγ to fold when N != p.
Half the rounds of halving-doubling or the tree, so the choice for the smallest buffers; the
whole buffer moves every round, so it loses as soon as bandwidth matters.
Both partners of a round must compute the same bits, so they combine in one canonical order:
the lower rank's data is always the left operand (this matters for Min/Max of +0 and -0).
Non-powers of two fold in and out exactly as in halving-doubling.
"""
from libc.string cimport memcpy
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.kernels.reduce cimport divide_by, reduce_into
from hvlite._core.algorithms.p2p cimport comm_size, fold_in, fold_out, pow2_floor, sendrecv, unfolded_rank


cdef int _exchange(char* buf, size_t count, int dtype, int op, int partner, bint lower,
                   MPI_Comm comm, Scratch* s) noexcept nogil:
    """One round: swap whole buffers with partner, then buf = lower op upper, segment by segment."""
    cdef size_t es = dtype_size(dtype), seg = s.seg_bytes // es, off = 0, n
    cdef char* theirs = s.buf + s.seg_bytes
    cdef int err
    if seg == 0:
        seg = 1
    while off < count:
        n = count - off if count - off < seg else seg
        err = sendrecv(buf + off * es, n * es, partner, theirs, n * es, partner, comm)
        if err:
            return err
        if lower:
            reduce_into(buf + off * es, theirs, n, dtype, op)
        else:
            reduce_into(theirs, buf + off * es, n, dtype, op)
            memcpy(buf + off * es, theirs, n * es)
        off += n
    return 0


cdef int rd_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                      Scratch* s) noexcept nogil:
    cdef int n = comm_size(comm), err, newrank, mask
    cdef int p = pow2_floor(n)
    if n == 1:
        if s.divisor > 1:
            divide_by(buf, count, dtype, s.divisor)
        return 0
    err = fold_in(buf, count, dtype, op, comm, s, &newrank)
    if err:
        return err
    if newrank >= 0:
        mask = 1
        while mask < p:
            err = _exchange(buf, count, dtype, op, unfolded_rank(newrank ^ mask, n),
                            newrank < (newrank ^ mask), comm, s)
            if err:
                return err
            mask <<= 1
        if s.divisor > 1:       # an Average: before the folded-out ranks get their copy
            divide_by(buf, count, dtype, s.divisor)
    return fold_out(buf, count * dtype_size(dtype), comm)
