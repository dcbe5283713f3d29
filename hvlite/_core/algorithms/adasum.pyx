"""Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021).

Two vectors combine as

    adasum(a, b) = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b

(a zero vector gets no correction term, so adasum(0, b) = b): the sum of orthogonal vectors, the
average of equal ones. N ranks combine as a binary tree, by vector-halving distance-doubling
(VHDD), as Horovod does:

* at distance d = 1, 2, 4, ... partners r and r^d hold the same range of their two groups'
  combined vectors; the lower keeps the first half, the upper the second, each receiving the
  partner's copy of the half it keeps. Each computes its half's share of a.b, |a|^2 and |b|^2
  per tensor in float64 (a is the lower group's vector); the 2d ranks that together hold the
  whole vectors add up those shares by recursive doubling, then each combines its half;
* the halves then travel back, distance halving, so every rank ends with every element.

Each element of a level's result is computed on one rank only, and the shares are added in the
same tree on every rank of a group, so every rank ends with the same bits.

Non-powers of two fold as rhd and rd do, with Adasum as the reduction: of the first 2(N-p) ranks
(p the largest power of two <= N) each odd rank receives its even neighbour's whole vector and
combines the pair locally, adasum(v_even, v_odd); the even ranks sit out and receive the result
at the end. The tree then runs over the p remaining ranks in rank order.

`counts` holds the tensors of a fused batch: each gets its own dot products. The coefficients
and the combination are computed in float64 and rounded once to the dtype (16-bit floats through
float32, as the other kernels round). Every transfer goes through p2p.sendrecv.
"""
from libc.stdlib cimport malloc, free
from libc.stdint cimport uint16_t
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport *
from hvlite._core.codes cimport *
from hvlite._core.codes cimport check
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.algorithms.p2p cimport comm_rank, comm_size, pow2_floor, sendrecv, unfolded_rank

cdef extern from "kernels/half.h" nogil:
    float hv_half_to_float(uint16_t)
    uint16_t hv_float_to_half(float)
    float hv_bf16_to_float(uint16_t)
    uint16_t hv_float_to_bf16(float)

cdef enum:
    CHUNK = 256          # 16-bit floats are widened this many at a time for the dot products
    MAX_LEVELS = 32

ctypedef fused real_t:
    float
    double


cdef void _dots_real(const real_t* a, const real_t* b, size_t n, double* out) noexcept nogil:
    """out += (a.b, |a|^2, |b|^2) in float64, four lanes each so the loop vectorizes."""
    cdef double acc[12]
    cdef double x, y
    cdef size_t i = 0, j
    for j in range(12):
        acc[j] = 0.0
    while i + 4 <= n:
        for j in range(4):
            x = a[i + j]
            y = b[i + j]
            acc[j] += x * y
            acc[4 + j] += x * x
            acc[8 + j] += y * y
        i += 4
    while i < n:
        x = a[i]
        y = b[i]
        acc[0] += x * y
        acc[4] += x * x
        acc[8] += y * y
        i += 1
    out[0] += (acc[0] + acc[1]) + (acc[2] + acc[3])
    out[1] += (acc[4] + acc[5]) + (acc[6] + acc[7])
    out[2] += (acc[8] + acc[9]) + (acc[10] + acc[11])


cdef void _widen(const uint16_t* src, float* dst, size_t n, bint brain) noexcept nogil:
    cdef size_t i
    if brain:
        for i in range(n):
            dst[i] = hv_bf16_to_float(src[i])
    else:
        for i in range(n):
            dst[i] = hv_half_to_float(src[i])


cdef void _dots(const char* a, const char* b, size_t n, int dtype, double* out) noexcept nogil:
    cdef float ta[CHUNK]
    cdef float tb[CHUNK]
    cdef size_t off = 0, m
    if dtype == DT_FLOAT32:
        _dots_real(<const float*>a, <const float*>b, n, out)
    elif dtype == DT_FLOAT64:
        _dots_real(<const double*>a, <const double*>b, n, out)
    else:
        while off < n:
            m = n - off if n - off < CHUNK else CHUNK
            _widen(<const uint16_t*>a + off, ta, m, dtype == DT_BFLOAT16)
            _widen(<const uint16_t*>b + off, tb, m, dtype == DT_BFLOAT16)
            _dots_real(ta, tb, m, out)
            off += m


cdef void _combine(char* out, const char* a, const char* b, size_t n, int dtype, double ca,
                   double cb) noexcept nogil:
    """out = ca a + cb b, elementwise in float64, rounded once; out may be a or b."""
    cdef size_t i
    cdef const uint16_t* ha = <const uint16_t*>a
    cdef const uint16_t* hb = <const uint16_t*>b
    cdef uint16_t* ho = <uint16_t*>out
    if dtype == DT_FLOAT32:
        for i in range(n):
            (<float*>out)[i] = <float>(ca * <double>(<const float*>a)[i]
                                       + cb * <double>(<const float*>b)[i])
    elif dtype == DT_FLOAT64:
        for i in range(n):
            (<double*>out)[i] = ca * (<const double*>a)[i] + cb * (<const double*>b)[i]
    elif dtype == DT_FLOAT16:
        for i in range(n):
            ho[i] = hv_float_to_half(<float>(ca * <double>hv_half_to_float(ha[i])
                                             + cb * <double>hv_half_to_float(hb[i])))
    else:
        for i in range(n):
            ho[i] = hv_float_to_bf16(<float>(ca * <double>hv_bf16_to_float(ha[i])
                                             + cb * <double>hv_bf16_to_float(hb[i])))


cdef inline double _coefficient(double dot, double norm_sq) noexcept nogil:
    """1 - a.b / 2|x|^2; a zero vector (norm_sq 0) has no correction term."""
    return 1.0 - dot / (2.0 * norm_sq) if norm_sq > 0 else 1.0


cdef void _shares(const char* a, const char* b, size_t lo, size_t hi, const size_t* counts,
                  size_t nt, int dtype, double* dots) noexcept nogil:
    """Each tensor's (a.b, |a|^2, |b|^2) over the elements [lo, hi) of the batch that a and b
    (which start at element lo) hold."""
    cdef size_t es = dtype_size(dtype), start = 0, end, s, e, t
    for t in range(nt):
        dots[3 * t] = dots[3 * t + 1] = dots[3 * t + 2] = 0.0
        end = start + counts[t]
        s = start if start > lo else lo
        e = end if end < hi else hi
        if s < e:
            _dots(a + (s - lo) * es, b + (s - lo) * es, e - s, dtype, &dots[3 * t])
        start = end


cdef void _combine_tensors(char* out, const char* a, const char* b, size_t lo, size_t hi,
                           const size_t* counts, size_t nt, int dtype,
                           const double* dots) noexcept nogil:
    """out[lo:hi] = adasum of a and b over [lo, hi), each tensor with its own coefficients."""
    cdef size_t es = dtype_size(dtype), start = 0, end, s, e, t, k
    for t in range(nt):
        end = start + counts[t]
        s = start if start > lo else lo
        e = end if end < hi else hi
        if s < e:
            k = (s - lo) * es
            _combine(out + k, a + k, b + k, e - s, dtype,
                     _coefficient(dots[3 * t], dots[3 * t + 1]),
                     _coefficient(dots[3 * t], dots[3 * t + 2]))
        start = end


cdef int _sum_shares(double* v, double* tmp, size_t m, int newrank, int top, int n,
                     MPI_Comm comm) noexcept nogil:
    """Add up v over the ranks whose new ranks differ from newrank only in the bits <= top, by
    recursive doubling; the lower rank's partial is always the left operand, so every rank of
    the group adds in the same tree and ends with the same bits."""
    cdef int mask = 1, partner, err
    cdef size_t i
    while mask <= top:
        partner = unfolded_rank(newrank ^ mask, n)
        err = sendrecv(<char*>v, m * sizeof(double), partner, <char*>tmp, m * sizeof(double),
                       partner, comm)
        if err:
            return err
        if newrank & mask:
            for i in range(m):
                v[i] = tmp[i] + v[i]
        else:
            for i in range(m):
                v[i] = v[i] + tmp[i]
        mask <<= 1
    return 0


cdef int _vhdd(char* buf, char* recv, size_t total, const size_t* counts, size_t nt, int dtype,
               double* dots, int newrank, int p, int n, MPI_Comm comm) noexcept nogil:
    cdef size_t es = dtype_size(dtype), lo = 0, hi = total, mid, klo, khi, slo, shi, olo, ohi
    cdef size_t spans[2 * MAX_LEVELS]
    cdef int mask = 1, level = 0, partner, err
    cdef bint upper
    cdef const char* a
    cdef const char* b
    while mask < p:                         # halving: combine, keeping half as much each level
        partner = unfolded_rank(newrank ^ mask, n)
        upper = (newrank & mask) != 0
        mid = lo + (hi - lo) // 2
        if upper:
            klo, khi, slo, shi = mid, hi, lo, mid
        else:
            klo, khi, slo, shi = lo, mid, mid, hi
        err = sendrecv(buf + slo * es, (shi - slo) * es, partner, recv, (khi - klo) * es,
                       partner, comm)
        if err:
            return err
        a = recv if upper else buf + klo * es
        b = buf + klo * es if upper else recv
        _shares(a, b, klo, khi, counts, nt, dtype, dots)
        err = _sum_shares(dots, dots + 3 * nt, 3 * nt, newrank, mask, n, comm)
        if err:
            return err
        _combine_tensors(buf + klo * es, a, b, klo, khi, counts, nt, dtype, dots)
        spans[2 * level] = lo
        spans[2 * level + 1] = hi
        lo, hi = klo, khi
        level += 1
        mask <<= 1
    while level > 0:                        # doubling: the combined halves travel back
        level -= 1
        mask >>= 1
        partner = unfolded_rank(newrank ^ mask, n)
        if newrank & mask:
            olo, ohi = spans[2 * level], lo
        else:
            olo, ohi = hi, spans[2 * level + 1]
        err = sendrecv(buf + lo * es, (hi - lo) * es, partner, buf + olo * es, (ohi - olo) * es,
                       partner, comm)
        if err:
            return err
        lo, hi = spans[2 * level], spans[2 * level + 1]
    return 0


cdef int adasum_allreduce(char* buf, const size_t* counts, size_t nt, int dtype,
                          MPI_Comm comm) noexcept nogil:
    cdef int n = comm_size(comm), r = comm_rank(comm), p, rem, newrank, err = 0
    cdef size_t es = dtype_size(dtype), total = 0, t, need
    cdef char* recv
    cdef double* dots
    for t in range(nt):
        total += counts[t]
    if n == 1 or total == 0:
        return 0
    p = pow2_floor(n)
    rem = n - p
    # Receive space: a folding odd rank takes its neighbour's whole vector, the others at most
    # the larger half (level 0; every later level receives less).
    need = total if r < 2 * rem and r % 2 else total - total // 2
    recv = <char*>malloc(need * es + 1)
    dots = <double*>malloc(6 * nt * sizeof(double))
    if recv == NULL or dots == NULL:
        free(recv)
        free(dots)
        return nomem(need * es + 1)
    if r < 2 * rem:
        newrank = -1 if r % 2 == 0 else r // 2
        if newrank < 0:
            err = sendrecv(buf, total * es, r + 1, NULL, 0, MPI_PROC_NULL, comm)
        else:
            err = sendrecv(NULL, 0, MPI_PROC_NULL, recv, total * es, r - 1, comm)
            if not err:         # the even neighbour's vector is the left operand
                _shares(recv, buf, 0, total, counts, nt, dtype, dots)
                _combine_tensors(buf, recv, buf, 0, total, counts, nt, dtype, dots)
    else:
        newrank = r - rem
    if not err and newrank >= 0:
        err = _vhdd(buf, recv, total, counts, nt, dtype, dots, newrank, p, n, comm)
    if not err and r < 2 * rem:
        if r % 2:
            err = sendrecv(buf, total * es, r - 1, NULL, 0, MPI_PROC_NULL, comm)
        else:
            err = sendrecv(NULL, 0, MPI_PROC_NULL, buf, total * es, r + 1, comm)
    free(recv)
    free(dots)
    return err


# ---- test hooks -----------------------------------------------------------------------------

def _float_code(arr):
    from hvlite._core.dtypes import code_of
    code = code_of(arr.dtype)
    if code not in (DT_FLOAT16, DT_BFLOAT16, DT_FLOAT32, DT_FLOAT64):
        raise TypeError(f"Adasum takes float16, bfloat16, float32 or float64, not {arr.dtype}")
    return code


def pair(a, b):
    """Test hook: adasum(a, b) of two same-shaped C-contiguous float arrays, by the kernels the
    collective runs (one tensor), as a new array."""
    import numpy as np
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        raise ValueError("pair: a and b must have the same dtype and shape")
    cdef int dtype = _float_code(a)
    out = np.empty_like(a)
    cdef size_t n = a.size
    cdef double dots[3]
    cdef const unsigned char[::1] av = a.reshape(-1).view(np.uint8)
    cdef const unsigned char[::1] bv = b.reshape(-1).view(np.uint8)
    cdef unsigned char[::1] ov = out.reshape(-1).view(np.uint8)
    if n:
        _shares(<const char*>&av[0], <const char*>&bv[0], 0, n, &n, 1, dtype, dots)
        _combine_tensors(<char*>&ov[0], <const char*>&av[0], <const char*>&bv[0], 0, n, &n, 1,
                         dtype, dots)
    return out


def allreduce_fused(comm, arr, counts):
    """Test hook: Adasum in place on the C-contiguous float array `arr`, whose elements are
    tensors of `counts` elements end to end, over the mpi4py communicator `comm` (collective;
    not for a communicator a coordinator is using)."""
    import numpy as np
    cdef int dtype = _float_code(arr)
    cdef size_t[::1] c = np.ascontiguousarray(counts, dtype=np.uintp)
    if sum(int(k) for k in counts) != arr.size or not arr.flags.c_contiguous:
        raise ValueError("allreduce_fused: counts must add up to the size of a C-contiguous array")
    cdef unsigned char[::1] v = arr.reshape(-1).view(np.uint8)
    cdef MPI_Comm mc = (<MPI.Comm>comm).ob_mpi
    cdef char* p = <char*>&v[0] if v.shape[0] else NULL
    cdef size_t* cp = &c[0] if c.shape[0] else NULL
    cdef size_t nt = c.shape[0]
    cdef int err
    with nogil:
        err = adasum_allreduce(p, cp, nt, dtype, mc) if nt else 0
    check(err, "adasum")
    return arr
