"""Typed reduction kernels: one loop per (dtype, op), written so the C compiler vectorizes them
(and a test hook for kernels/stream.h, the copy past the cache that writes their results out).

Integer arithmetic wraps (the module is compiled with -fwrapv), as NumPy's and MPI's do.
Float Min/Max (minmax.h) propagate NaN as NumPy's minimum/maximum do, as the default quiet NaN, and
order -0 below +0, so their bits never depend on the order operands are combined in.
"""
from libc.stdint cimport (int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t,
                          INT8_MAX, INT8_MIN, UINT8_MAX, INT16_MAX, INT16_MIN, UINT16_MAX,
                          INT32_MAX, INT32_MIN, UINT32_MAX, INT64_MAX, INT64_MIN, UINT64_MAX)
from libc.math cimport INFINITY
from libc.string cimport memcpy, memset
from hvlite._core.dtypes cimport *
from hvlite._core.codes cimport *

cdef extern from "kernels/half.h" nogil:
    float hv_half_to_float(uint16_t)
    uint16_t hv_float_to_half(float)
    int hv_cpu_f16c()
    size_t hv_half_reduce_f16c(uint16_t* a, const uint16_t* b, size_t n, int op)
    size_t hv_half_divide_f16c(uint16_t* a, size_t n, float d)
    int hv_cpu_avx2()
    int hv_cpu_cast_simd()
    size_t hv_f32h_reduce_simd(float* d, const float* a, const float* b, size_t n, int op, int brain)
    size_t hv_f32h_divide_simd(float* a, size_t n, float d, int brain)
    void hv_f32h_reduce_scalar(float* d, const float* a, const float* b, size_t n, int op, int brain)
    void hv_f32h_divide_scalar(float* a, size_t n, float d, int brain)
    size_t hv_bf16_reduce_avx2(uint16_t* a, const uint16_t* b, size_t n, int op)
    size_t hv_bf16_divide_avx2(uint16_t* a, size_t n, float d)
    float hv_bf16_to_float(uint16_t)
    uint16_t hv_float_to_bf16(float)

cdef extern from "kernels/minmax.h" nogil:
    float hv_minf(float, float)
    float hv_maxf(float, float)
    void hv_min_f32(float* a, const float* b, size_t n)
    void hv_max_f32(float* a, const float* b, size_t n)
    void hv_min_f64(double* a, const double* b, size_t n)
    void hv_max_f64(double* a, const double* b, size_t n)

from hvlite._core.kernels.stream cimport hv_prefetch, hv_stream_copy_ahead, hv_stream_force

cdef extern from "kernels/arith.h" nogil:
    size_t hv_add_f32(float* a, const float* b, size_t n)
    size_t hv_add_f64(double* a, const double* b, size_t n)
    size_t hv_add3_f32(float* dst, const float* a, const float* b, size_t n)
    size_t hv_add3_f64(double* dst, const double* a, const double* b, size_t n)
    size_t hv_scale_f32(float* dst, const float* src, size_t n, float r)
    size_t hv_scale_f64(double* dst, const double* src, size_t n, double r)

ctypedef fused num_t:
    int8_t
    uint8_t
    int16_t
    uint16_t
    int32_t
    uint32_t
    int64_t
    uint64_t
    float
    double


cdef inline void _native(num_t* a, const num_t* b, size_t n, int op) noexcept nogil:
    cdef size_t i, start = 0
    if op == OP_SUM:
        if num_t is float:
            start = hv_add_f32(a, b, n)
        elif num_t is double:
            start = hv_add_f64(a, b, n)
        for i in range(start, n):
            a[i] = a[i] + b[i]
    elif op == OP_PRODUCT:
        for i in range(n):
            a[i] = a[i] * b[i]
    elif num_t is float:
        if op == OP_MIN:
            hv_min_f32(a, b, n)
        elif op == OP_MAX:
            hv_max_f32(a, b, n)
    elif num_t is double:
        if op == OP_MIN:
            hv_min_f64(a, b, n)
        elif op == OP_MAX:
            hv_max_f64(a, b, n)
    elif op == OP_MIN:
        for i in range(n):
            a[i] = b[i] if b[i] < a[i] else a[i]
    elif op == OP_MAX:
        for i in range(n):
            a[i] = b[i] if b[i] > a[i] else a[i]


ctypedef float (*widen_fn)(uint16_t) noexcept nogil
ctypedef uint16_t (*narrow_fn)(float) noexcept nogil


cdef inline void _half(uint16_t* a, const uint16_t* b, size_t n, int op, bint brain) noexcept nogil:
    cdef size_t i, start = 0
    cdef float x, y
    if not brain and hv_cpu_f16c():
        start = hv_half_reduce_f16c(a, b, n, op)
    elif brain and hv_cpu_avx2():
        start = hv_bf16_reduce_avx2(a, b, n, op)
    for i in range(start, n):
        if brain:
            x = hv_bf16_to_float(a[i]); y = hv_bf16_to_float(b[i])
        else:
            x = hv_half_to_float(a[i]); y = hv_half_to_float(b[i])
        if op == OP_SUM:
            x = x + y
        elif op == OP_PRODUCT:
            x = x * y
        elif op == OP_MIN:
            x = hv_minf(x, y)
        else:
            x = hv_maxf(x, y)
        a[i] = hv_float_to_bf16(x) if brain else hv_float_to_half(x)


cdef inline void _as_half(float* d, const float* a, const float* b, size_t n, int op,
                          bint brain) noexcept nogil:
    """d = a (op) b for float32 buffers reduced as float16/bfloat16 (codes.h): each operand and
    the result rounded to 16 bits as the casts and the 16-bit kernels round them
    (kernels/half.h); d may be a."""
    cdef size_t start = hv_f32h_reduce_simd(d, a, b, n, op, brain) if hv_cpu_cast_simd() else 0
    hv_f32h_reduce_scalar(d + start, a + start, b + start, n - start, op, brain)


cdef void reduce_into(void* acc, const void* src, size_t n, int dtype, int op) noexcept nogil:
    if dtype == DT_FLOAT32:
        _native(<float*>acc, <const float*>src, n, op)
    elif dtype == DT_FLOAT64:
        _native(<double*>acc, <const double*>src, n, op)
    elif dtype == DT_FLOAT16:
        _half(<uint16_t*>acc, <const uint16_t*>src, n, op, False)
    elif dtype == DT_BFLOAT16:
        _half(<uint16_t*>acc, <const uint16_t*>src, n, op, True)
    elif dtype == DT_INT8:
        _native(<int8_t*>acc, <const int8_t*>src, n, op)
    elif dtype == DT_UINT8:
        _native(<uint8_t*>acc, <const uint8_t*>src, n, op)
    elif dtype == DT_INT16:
        _native(<int16_t*>acc, <const int16_t*>src, n, op)
    elif dtype == DT_UINT16:
        _native(<uint16_t*>acc, <const uint16_t*>src, n, op)
    elif dtype == DT_INT32:
        _native(<int32_t*>acc, <const int32_t*>src, n, op)
    elif dtype == DT_UINT32:
        _native(<uint32_t*>acc, <const uint32_t*>src, n, op)
    elif dtype == DT_INT64:
        _native(<int64_t*>acc, <const int64_t*>src, n, op)
    elif dtype == DT_UINT64:
        _native(<uint64_t*>acc, <const uint64_t*>src, n, op)
    elif dtype == DT_F32_AS_F16 or dtype == DT_F32_AS_BF16:
        _as_half(<float*>acc, <const float*>acc, <const float*>src, n, op, dtype == DT_F32_AS_BF16)


cdef enum:
    REDUCE_TO_CHUNK = 4096      # bytes copied then reduced at a time: the copy is still in L1


cdef inline void _add3(num_t* dst, const num_t* a, const num_t* b, size_t n) noexcept nogil:
    cdef size_t i, start = 0
    if num_t is float:
        start = hv_add3_f32(dst, a, b, n)
    elif num_t is double:
        start = hv_add3_f64(dst, a, b, n)
    for i in range(start, n):
        dst[i] = a[i] + b[i]


cdef void reduce_to(void* dst, const void* a, const void* b, size_t n, int dtype, int op) noexcept nogil:
    cdef size_t start = 0, es, step, k
    if dst == a:
        reduce_into(dst, b, n, dtype, op)
    elif op == OP_SUM and dtype == DT_FLOAT32:
        _add3(<float*>dst, <const float*>a, <const float*>b, n)
    elif op == OP_SUM and dtype == DT_FLOAT64:
        _add3(<double*>dst, <const double*>a, <const double*>b, n)
    elif dtype == DT_F32_AS_F16 or dtype == DT_F32_AS_BF16:
        _as_half(<float*>dst, <const float*>a, <const float*>b, n, op, dtype == DT_F32_AS_BF16)
    else:
        es = dtype_size(dtype)
        step = REDUCE_TO_CHUNK // es
        while start < n:
            k = n - start if n - start < step else step
            memcpy(<char*>dst + start * es, <const char*>a + start * es, k * es)
            reduce_into(<char*>dst + start * es, <const char*>b + start * es, k, dtype, op)
            start += k


cdef inline bint _multiplies(num_t* a, long d) noexcept nogil:
    """Float division by a power of two: 1/d is exact, so x * (1/d) and x / d are the same real
    number and round alike (subnormals, infinities and NaNs included): the quotient's bits at a
    multiply's cost (a vector divide costs ~10: Average at 1 MiB ran 1.2-1.6x Sum)."""
    return (num_t is float or num_t is double) and d & (d - 1) == 0


cdef inline void _idiv(num_t* a, const num_t* src, size_t n, long d) noexcept nogil:
    # a[i] = src[i] / d (a is src, or does not overlap it). Integers truncate toward zero
    # (cdivision). d stays a long: a narrow cast of the rank count would overflow int8 at 128 ranks.
    cdef size_t i, start = 0
    cdef num_t r
    if _multiplies(a, d):
        r = <num_t>(1.0 / <double>d)
        if num_t is float:
            start = hv_scale_f32(a, src, n, r)
        elif num_t is double:
            start = hv_scale_f64(a, src, n, r)
        for i in range(start, n):
            a[i] = src[i] * r
        return
    for i in range(n):
        a[i] = <num_t>(src[i] / d) if num_t is float or num_t is double else src[i] // d


cdef void finish_op(void* buf, size_t n, int dtype, int op, long divisor) noexcept nogil:
    """After the kernels ran kernel_op(op): Average divides by `divisor` (the set's size)."""
    if op == OP_AVERAGE:
        divide_by(buf, n, dtype, divisor)


cdef void divide_by(void* buf, size_t n, int dtype, long divisor) noexcept nogil:
    cdef size_t i
    cdef uint16_t* h = <uint16_t*>buf
    if divisor == 1:
        return
    if dtype == DT_FLOAT32:
        _idiv(<float*>buf, <const float*>buf, n, divisor)
    elif dtype == DT_FLOAT64:
        _idiv(<double*>buf, <const double*>buf, n, divisor)
    elif dtype == DT_FLOAT16:
        i = hv_half_divide_f16c(h, n, <float>divisor) if hv_cpu_f16c() else 0
        while i < n:
            h[i] = hv_float_to_half(hv_half_to_float(h[i]) / <float>divisor)
            i += 1
    elif dtype == DT_BFLOAT16:
        i = hv_bf16_divide_avx2(h, n, <float>divisor) if hv_cpu_avx2() else 0
        while i < n:
            h[i] = hv_float_to_bf16(hv_bf16_to_float(h[i]) / <float>divisor)
            i += 1
    elif dtype == DT_F32_AS_F16 or dtype == DT_F32_AS_BF16:
        i = (hv_f32h_divide_simd(<float*>buf, n, <float>divisor, dtype == DT_F32_AS_BF16)
             if hv_cpu_cast_simd() else 0)
        hv_f32h_divide_scalar(<float*>buf + i, n - i, <float>divisor, dtype == DT_F32_AS_BF16)
    elif dtype == DT_INT8:
        _idiv(<int8_t*>buf, <const int8_t*>buf, n, divisor)
    elif dtype == DT_UINT8:
        _idiv(<uint8_t*>buf, <const uint8_t*>buf, n, divisor)
    elif dtype == DT_INT16:
        _idiv(<int16_t*>buf, <const int16_t*>buf, n, divisor)
    elif dtype == DT_UINT16:
        _idiv(<uint16_t*>buf, <const uint16_t*>buf, n, divisor)
    elif dtype == DT_INT32:
        _idiv(<int32_t*>buf, <const int32_t*>buf, n, divisor)
    elif dtype == DT_UINT32:
        _idiv(<uint32_t*>buf, <const uint32_t*>buf, n, divisor)
    elif dtype == DT_INT64:
        _idiv(<int64_t*>buf, <const int64_t*>buf, n, divisor)
    elif dtype == DT_UINT64:
        _idiv(<uint64_t*>buf, <const uint64_t*>buf, n, divisor)


cdef void copy_divided(void* dst, const void* src, size_t n, int dtype, long divisor) noexcept nogil:
    """dst = src / divisor for n elements, dst and src apart: float32 and float64 divide as they
    are copied (one pass), other dtypes are copied and then divided."""
    if divisor > 1 and dtype == DT_FLOAT32:
        _idiv(<float*>dst, <const float*>src, n, divisor)
    elif divisor > 1 and dtype == DT_FLOAT64:
        _idiv(<double*>dst, <const double*>src, n, divisor)
    else:
        memcpy(dst, src, n * dtype_size(dtype))
        if divisor > 1:
            divide_by(dst, n, dtype, divisor)


def reduce_arrays(acc, src, int dtype, int op):
    """Test hook: acc (op)= src elementwise on two same-sized writable/readable buffers."""
    cdef const unsigned char[::1] s = memoryview(src).cast("B")
    cdef unsigned char[::1] a = memoryview(acc).cast("B")
    if a.shape[0] != s.shape[0]:
        raise ValueError("buffers differ in size")
    cdef size_t n = a.shape[0] // dtype_size(dtype)
    if n:
        reduce_into(&a[0], &s[0], n, dtype, op)


def reduce_arrays_to(dst, a, b, int dtype, int op):
    """Test hook: dst = a (op) b elementwise on three same-sized buffers (dst apart from b)."""
    cdef unsigned char[::1] o = memoryview(dst).cast("B")
    cdef const unsigned char[::1] x = memoryview(a).cast("B")
    cdef const unsigned char[::1] y = memoryview(b).cast("B")
    if not (o.shape[0] == x.shape[0] == y.shape[0]):
        raise ValueError("buffers differ in size")
    cdef size_t n = o.shape[0] // dtype_size(dtype)
    if n:
        reduce_to(&o[0], &x[0], &y[0], n, dtype, op)


def stream_copy_array(dst, src, int level=-1, ahead=None):
    """Test hook: dst[:] = src through hv_stream_copy_ahead with stores of 2: 64, 1: 32, 0: 16
    bytes (-1: the widest this CPU takes), prefetching `ahead` (a buffer) meanwhile; returns the
    width it ran at (-1 where the copy is memcpy) and how many of ahead's bytes were left."""
    cdef unsigned char[::1] o = memoryview(dst).cast("B")
    cdef const unsigned char[::1] i = memoryview(src).cast("B")
    cdef const unsigned char[::1] pf
    cdef hv_prefetch near
    cdef hv_prefetch* use = NULL
    if o.shape[0] != i.shape[0]:
        raise ValueError("buffers differ in size")
    if ahead is not None:
        pf = memoryview(ahead).cast("B")
        near.at = <const char*>&pf[0] if pf.shape[0] else NULL
        near.left = pf.shape[0]
        use = &near
    cdef int widest = hv_stream_force(-1), ran
    if level > widest:
        raise ValueError(f"this CPU has no stores of level {level} (widest {widest})")
    hv_stream_force(level if level >= 0 else widest)
    ran = hv_stream_force(-1)
    try:
        if o.shape[0]:
            hv_stream_copy_ahead(<char*>&o[0], <const char*>&i[0], o.shape[0], use)
    finally:
        hv_stream_force(widest)
    return ran, (use.left if use != NULL else 0)


def divide_array(buf, int dtype, long divisor, src=None):
    """Test hook: buf /= divisor with the core's rounding; with `src` (as large, apart from
    buf): buf = src / divisor, divided as it is copied."""
    cdef unsigned char[::1] a = memoryview(buf).cast("B")
    cdef const unsigned char[::1] s
    cdef size_t n = a.shape[0] // dtype_size(dtype)
    if src is not None:
        s = memoryview(src).cast("B")
        if s.shape[0] != a.shape[0]:
            raise ValueError("buffers differ in size")
        if n:
            copy_divided(&a[0], &s[0], n, dtype, divisor)
    elif n:
        divide_by(&a[0], n, dtype, divisor)


cdef inline void _fill(num_t* a, size_t n, num_t v) noexcept nogil:
    cdef size_t i
    for i in range(n):
        a[i] = v


cdef void fill_identity(void* buf, size_t n, int dtype, int op) noexcept nogil:
    cdef uint16_t h
    if op == OP_SUM or op == OP_AVERAGE or op == OP_ADASUM:     # adasum(0, b) = b
        memset(buf, 0, n * dtype_size(dtype))
        return
    if dtype == DT_FLOAT16 or dtype == DT_BFLOAT16:
        if op == OP_PRODUCT:
            h = 0x3c00 if dtype == DT_FLOAT16 else 0x3f80
        elif op == OP_MIN:
            h = 0x7c00 if dtype == DT_FLOAT16 else 0x7f80
        else:
            h = 0xfc00 if dtype == DT_FLOAT16 else 0xff80
        _fill(<uint16_t*>buf, n, h)
    elif dtype == DT_FLOAT32 or dtype == DT_F32_AS_F16 or dtype == DT_F32_AS_BF16:
        _fill(<float*>buf, n, 1.0 if op == OP_PRODUCT else (INFINITY if op == OP_MIN else -INFINITY))
    elif dtype == DT_FLOAT64:
        _fill(<double*>buf, n, 1.0 if op == OP_PRODUCT else (INFINITY if op == OP_MIN else -INFINITY))
    elif dtype == DT_INT8:
        _fill(<int8_t*>buf, n, 1 if op == OP_PRODUCT else (INT8_MAX if op == OP_MIN else INT8_MIN))
    elif dtype == DT_UINT8:
        _fill(<uint8_t*>buf, n, 1 if op == OP_PRODUCT else (UINT8_MAX if op == OP_MIN else 0))
    elif dtype == DT_INT16:
        _fill(<int16_t*>buf, n, 1 if op == OP_PRODUCT else (INT16_MAX if op == OP_MIN else INT16_MIN))
    elif dtype == DT_UINT16:
        _fill(<uint16_t*>buf, n, 1 if op == OP_PRODUCT else (UINT16_MAX if op == OP_MIN else 0))
    elif dtype == DT_INT32:
        _fill(<int32_t*>buf, n, 1 if op == OP_PRODUCT else (INT32_MAX if op == OP_MIN else INT32_MIN))
    elif dtype == DT_UINT32:
        _fill(<uint32_t*>buf, n, 1 if op == OP_PRODUCT else (UINT32_MAX if op == OP_MIN else 0))
    elif dtype == DT_INT64:
        _fill(<int64_t*>buf, n, 1 if op == OP_PRODUCT else (INT64_MAX if op == OP_MIN else INT64_MIN))
    elif dtype == DT_UINT64:
        _fill(<uint64_t*>buf, n, 1 if op == OP_PRODUCT else (UINT64_MAX if op == OP_MIN else 0))


def fill_identity_array(buf, int dtype, int op):
    """Test hook: fill a buffer with the op's identity."""
    cdef unsigned char[::1] a = memoryview(buf).cast("B")
    cdef size_t n = a.shape[0] // dtype_size(dtype)
    if n:
        fill_identity(&a[0], n, dtype, op)
