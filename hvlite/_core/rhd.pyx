"""Recursive halving-doubling all-reduce (Rabenseifner): reduce-scatter by recursive halving,
allgather by recursive doubling.

Cost (N ranks, n bytes, p = largest power of two <= N):
2 log2(p) α + 2((p-1)/p) nβ + ((p-1)/p) nγ, plus 2(α + nβ) + nγ when N is not a power of two.
Non-powers of two fold in first: of the first 2(N-p) ranks, each even rank hands its whole buffer
to the odd rank above it and sits out; the p remaining ranks run the power-of-two algorithm; the
odd ranks hand the result back at the end. The vector is cut into p blocks; halving keeps the
lower half when the current bit of the (new) rank is 0, so new rank k ends owning block k.
"""
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.p2p cimport block_start, comm_size, fold_in, fold_out, pow2_floor, sendrecv, sendrecv_reduce, unfolded_rank


cdef int rhd_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                       Scratch* s) noexcept nogil:
    cdef int n = comm_size(comm), err = 0
    cdef size_t es = dtype_size(dtype)
    cdef int p = pow2_floor(n), newrank, mask, partner
    cdef size_t lo, hi, mid, klo, khi, slo, shi, a, b
    if n == 1:
        return 0
    err = fold_in(buf, count, dtype, op, comm, s, &newrank)
    if err:
        return err
    if newrank >= 0:
        # Reduce-scatter by recursive halving over block indices [lo, hi).
        lo = 0
        hi = p
        mask = p >> 1
        while mask > 0:
            partner = unfolded_rank(newrank ^ mask, n)
            mid = lo + (hi - lo) // 2
            if newrank & mask:
                klo, khi, slo, shi = mid, hi, lo, mid
            else:
                klo, khi, slo, shi = lo, mid, mid, hi
            a = block_start(count, p, slo)
            b = block_start(count, p, shi)
            err = sendrecv_reduce(buf + a * es, b - a, partner,
                                  buf + block_start(count, p, klo) * es,
                                  block_start(count, p, khi) - block_start(count, p, klo), partner,
                                  dtype, op, comm, s)
            if err:
                return err
            lo, hi = klo, khi
            mask >>= 1
        # Allgather by recursive doubling: exchange aligned runs of `mask` blocks.
        mask = 1
        while mask < p:
            partner = unfolded_rank(newrank ^ mask, n)
            klo = <size_t>(newrank & ~(mask - 1))
            slo = klo ^ <size_t>mask
            a = block_start(count, p, klo)
            b = block_start(count, p, klo + mask)
            lo = block_start(count, p, slo)
            hi = block_start(count, p, slo + mask)
            err = sendrecv(buf + a * es, (b - a) * es, partner, buf + lo * es, (hi - lo) * es,
                           partner, comm)
            if err:
                return err
            mask <<= 1
    return fold_out(buf, count * es, comm)
