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
from hvlite._core.reduce cimport reduce_into
from hvlite._core.p2p cimport comm_size, comm_rank, sendrecv, sendrecv_reduce


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
    cdef int n = comm_size(comm), r = comm_rank(comm), err = 0
    cdef int p = 1, rem, newrank, mask, partner_new, partner
    if n == 1:
        return 0
    while p * 2 <= n:
        p *= 2
    rem = n - p
    if r < 2 * rem:
        if r % 2 == 0:
            err = sendrecv_reduce(buf, count, r + 1, NULL, 0, MPI_PROC_NULL, dtype, op, comm, s)
            newrank = -1
        else:
            err = sendrecv_reduce(NULL, 0, MPI_PROC_NULL, buf, count, r - 1, dtype, op, comm, s)
            newrank = r // 2
        if err:
            return err
    else:
        newrank = r - rem
    if newrank >= 0:
        mask = 1
        while mask < p:
            partner_new = newrank ^ mask
            partner = partner_new * 2 + 1 if partner_new < rem else partner_new + rem
            err = _exchange(buf, count, dtype, op, partner, newrank < partner_new, comm, s)
            if err:
                return err
            mask <<= 1
    if r < 2 * rem:
        if r % 2:
            err = sendrecv(buf, count * dtype_size(dtype), r - 1, NULL, 0, MPI_PROC_NULL, comm)
        else:
            err = sendrecv(NULL, 0, MPI_PROC_NULL, buf, count * dtype_size(dtype), r + 1, comm)
    return err
