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
from hvlite._core.shm.segment cimport (ShmArea, shm_slot, shm_barrier, shm_reduce_slots,
                                       shm_preload, shm_preload_room, shm_preloaded)

cdef enum:
    LINE = 64


cdef inline size_t _block(int64_t rows, int L, int j) noexcept nogil:
    """Rows of rank j's block: the first rows % L ranks get one more (reducescatter_rows)."""
    return <size_t>(rows // L + (1 if j < rows % L else 0))


cdef inline size_t _part(size_t room, int L, size_t es) noexcept nogil:
    """Elements of each destination's part in a slot of `room` bytes (0: not one fits)."""
    cdef size_t q = room // <size_t>L // es
    if q >= LINE // es:         # parts on their own cache lines
        q = q // (LINE // es) * (LINE // es)
    return q


cdef size_t shm_reducescatter_carry(ShmArea* a, int n, const char* input, int64_t rows,
                                    size_t row_elems, int dtype) noexcept nogil:
    cdef int L = a.L, j
    cdef size_t es = dtype_size(dtype), q = _part(shm_preload_room(a, n), L, es), first = 0, c
    if q == 0 or _block(rows, L, 0) * row_elems > q:     # rank 0's block is the largest
        return 0
    for j in range(L):
        c = _block(rows, L, j) * row_elems
        if j != a.me:
            shm_preload(a, n, <size_t>j * q * es, input + first * es, c * es)
        first += c
    return <size_t>rows * row_elems * es


cdef int shm_reducescatter(ShmArea* a, const char* input, char* output, int64_t rows,
                           size_t row_elems, int dtype, int op) noexcept nogil:
    cdef int L = a.L, j, p, err
    cdef size_t es = dtype_size(dtype), i, n, c, first = 0, me_at = 0
    cdef size_t most = _block(rows, L, 0) * row_elems          # rank 0's block is the largest
    cdef long divisor = L if op == OP_AVERAGE else 1
    # every rank's parts rode with the vote: one round, its barrier the vote's
    cdef bint carried = shm_preloaded(a, <size_t>rows * row_elems * es)
    cdef size_t base = a.pre_off if carried else 0        # where the parts start in a slot
    cdef size_t q = _part(a.seg - base, L, es)
    cdef char* slot
    if q == 0:                  # a part could not hold one element: MPI's path (every rank)
        return HV_ERR_SHM
    for j in range(a.me):
        me_at += _block(rows, L, j) * row_elems
    i = 0
    while i < most:             # the same rounds on every rank: rows is the agreed shape's
        if carried and i == 0:
            p = a.epoch & 1
        else:
            p = (a.epoch + 1) & 1
            slot = shm_slot(a, a.me, p) + base
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
            shm_reduce_slots(a, p, base // es + <size_t>a.me * q, n, dtype, kernel_op(op),
                             input + (me_at + i) * es, output + i * es, divisor)
        i += q
    return 0
