# Reduction ops: OP_* in codes.h (Average never reaches a kernel: Sum, then divide_by).
from hvlite._core.codes cimport *

# acc[i] = acc[i] (op) src[i] for i < n. acc and src never overlap.
cdef void reduce_into(void* acc, const void* src, size_t n, int dtype, int op) noexcept nogil
# dst[i] = a[i] (op) b[i] for i < n: an out-of-place reduction in one pass where it has a vector
# loop (float32/float64 Sum), else a copy and reduce_into chunk by chunk, in L1. dst is a or
# overlaps neither; b never overlaps dst. The bits are reduce_into's on a copy of a.
cdef void reduce_to(void* dst, const void* a, const void* b, size_t n, int dtype, int op) noexcept nogil
# buf[i] /= divisor (integers truncate toward zero, 16-bit floats round once).
cdef void divide_by(void* buf, size_t n, int dtype, long divisor) noexcept nogil
# dst[i] = src[i] / divisor, dst and src apart (a copy that divides: one pass for floats).
cdef void copy_divided(void* dst, const void* src, size_t n, int dtype, long divisor) noexcept nogil
# Average is a Sum, then a divide by the set's size (joined ranks count, contributing zeros, as in
# Horovod); these two say so once, for every caller (dispatch, the shared segment's fused batches,
# reducescatter).
cdef inline int kernel_op(int op) noexcept nogil:
    """The op the kernels and MPI run for `op`."""
    return OP_SUM if op == OP_AVERAGE else op
cdef void finish_op(void* buf, size_t n, int dtype, int op, long divisor) noexcept nogil
# What a rank that has joined contributes: the op's identity (0, 1, +max, -max; 0 for Adasum,
# whose zero vector adds nothing). Adasum never reaches the other kernels (algorithms/adasum.pyx).
cdef void fill_identity(void* buf, size_t n, int dtype, int op) noexcept nogil
