"""Reduce-scatter among the ranks of one node, through its shared segment.

A rank's slot holds one part per destination rank; round i carries elements [i*q, (i+1)*q) of
each destination's block, and after the round's barrier every rank reduces its own part from
every slot (its own contribution read from its input) straight into its output, dividing there
for an Average. Each rank reduces only its block, so the work is spread evenly; a 4 KiB call is
one barrier where MPI's is a message exchange.
"""
from libc.string cimport memcpy
from libc.stdint cimport int64_t
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.kernels.reduce cimport kernel_op
from hvlite._core.codes cimport OP_AVERAGE, HV_ERR_SHM
from hvlite._core.shm.segment cimport ShmArea, shm_slot, shm_barrier, shm_reduce_slots

cdef enum:
    LINE = 64


cdef inline size_t _block(int64_t rows, int L, int j) noexcept nogil:
    """Rows of rank j's block: the first rows % L ranks get one more (reducescatter_rows)."""
    return <size_t>(rows // L + (1 if j < rows % L else 0))


cdef int shm_reducescatter(ShmArea* a, const char* input, char* output, int64_t rows,
                           size_t row_elems, int dtype, int op) noexcept nogil:
    cdef int L = a.L, j, p, err
    cdef size_t es = dtype_size(dtype), q = a.seg // <size_t>L // es, i, n, c, first = 0, me_at = 0
    cdef size_t most = _block(rows, L, 0) * row_elems          # rank 0's block is the largest
    cdef long divisor = L if op == OP_AVERAGE else 1
    cdef char* slot
    if q == 0:                  # a part could not hold one element: MPI's path (every rank)
        return HV_ERR_SHM
    if q >= LINE // es:         # parts on their own cache lines
        q = q // (LINE // es) * (LINE // es)
    for j in range(a.me):
        me_at += _block(rows, L, j) * row_elems
    i = 0
    while i < most:             # the same rounds on every rank: rows is the agreed shape's
        p = (a.epoch + 1) & 1
        slot = shm_slot(a, a.me, p)
        first = 0
        for j in range(L):
            c = _block(rows, L, j) * row_elems
            if j != a.me and i < c:
                n = c - i if c - i < q else q
                memcpy(slot + <size_t>j * q * es, input + (first + i) * es, n * es)
            first += c
        err = shm_barrier(a)
        if err:
            return err
        c = _block(rows, L, a.me) * row_elems
        if i < c:
            n = c - i if c - i < q else q
            shm_reduce_slots(a, p, <size_t>a.me * q, n, dtype, kernel_op(op),
                             input + (me_at + i) * es, output + i * es, divisor)
        i += q
    return 0
