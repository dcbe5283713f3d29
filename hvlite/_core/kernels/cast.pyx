"""Whole-array casts between float32 and the 16-bit floats, for the fp16/bf16 compression.

NumPy's float16 astype runs a scalar loop at ~3 GB/s; here F16C converts 8 lanes at once (AVX2 for
bfloat16) where the CPU has them, picked at run time, with the scalar code of half.h otherwise. The
bits are NumPy's (float16) and ml_dtypes' (bfloat16) in every case, NaN payloads included.
"""
cimport numpy as cnp
from libc.stdint cimport uint16_t, uint32_t

cnp.import_array()

cdef extern from "kernels/half.h" nogil:
    int hv_cpu_cast_simd()
    void hv_cast_f32_f16_scalar(uint16_t* d, const uint32_t* s, size_t n)
    void hv_cast_f16_f32_scalar(uint32_t* d, const uint16_t* s, size_t n)
    void hv_cast_f32_bf16_scalar(uint16_t* d, const uint32_t* s, size_t n)
    void hv_cast_bf16_f32_scalar(uint32_t* d, const uint16_t* s, size_t n)
    size_t hv_cast_f32_f16_simd(uint16_t* d, const uint32_t* s, size_t n)
    size_t hv_cast_f16_f32_simd(uint32_t* d, const uint16_t* s, size_t n)
    size_t hv_cast_f32_bf16_simd(uint16_t* d, const uint32_t* s, size_t n)
    size_t hv_cast_bf16_f32_simd(uint32_t* d, const uint16_t* s, size_t n)

cdef enum Kind:
    TO_F16, FROM_F16, TO_BF16, FROM_BF16

# Below this many elements the loop keeps the GIL: it takes microseconds, and a thread that lets
# the GIL go may wait for another thread's switch interval to get it back.
cdef Py_ssize_t NOGIL_MIN = 1 << 18


def simd():
    """True where the vector code runs on this CPU (F16C and AVX2)."""
    return bool(hv_cpu_cast_simd())


def _bfloat16_num():
    try:
        import ml_dtypes
    except ImportError:
        return -1
    import numpy as np
    return np.dtype(ml_dtypes.bfloat16).num


cdef int BF16 = _bfloat16_num()      # ml_dtypes' type number (-1 without it)


cdef int _kind(cnp.ndarray src, cnp.ndarray dst) except -1:
    """Which cast `src` -> `dst` is (by type number: dtype.name is a slow Python property);
    TypeError for any other pair of dtypes."""
    cdef int s = cnp.PyArray_TYPE(src), d = cnp.PyArray_TYPE(dst)
    if s == cnp.NPY_FLOAT32:
        if d == cnp.NPY_FLOAT16:
            return TO_F16
        if d == BF16:
            return TO_BF16
    elif d == cnp.NPY_FLOAT32:
        if s == cnp.NPY_FLOAT16:
            return FROM_F16
        if s == BF16:
            return FROM_BF16
    raise TypeError(f"cast: float32 to or from float16/bfloat16 only, "
                    f"not {src.dtype} to {dst.dtype}")


cdef int _check(cnp.ndarray src, cnp.ndarray dst) except -1:
    """Sizes and layout, in 64-bit Python integers, before any pointer is used."""
    if not cnp.PyArray_IS_C_CONTIGUOUS(src) or not cnp.PyArray_IS_C_CONTIGUOUS(dst):
        raise ValueError("cast: both arrays must be C-contiguous")
    if not cnp.PyArray_ISWRITEABLE(dst):
        raise ValueError("cast: the destination is read-only")
    if src.size != dst.size:
        raise ValueError(f"cast: {src.size} elements into {dst.size}")
    cdef size_t s = <size_t>cnp.PyArray_DATA(src), d = <size_t>cnp.PyArray_DATA(dst)
    if src.size and s < d + <size_t>dst.nbytes and d < s + <size_t>src.nbytes:
        raise ValueError("cast: source and destination overlap")
    return 0


cdef void _run(int kind, void* d, const void* s, size_t n, bint vec) noexcept nogil:
    cdef size_t k = 0
    if kind == TO_F16:
        if vec:
            k = hv_cast_f32_f16_simd(<uint16_t*>d, <const uint32_t*>s, n)
        hv_cast_f32_f16_scalar(<uint16_t*>d + k, <const uint32_t*>s + k, n - k)
    elif kind == FROM_F16:
        if vec:
            k = hv_cast_f16_f32_simd(<uint32_t*>d, <const uint16_t*>s, n)
        hv_cast_f16_f32_scalar(<uint32_t*>d + k, <const uint16_t*>s + k, n - k)
    elif kind == TO_BF16:
        if vec:
            k = hv_cast_f32_bf16_simd(<uint16_t*>d, <const uint32_t*>s, n)
        hv_cast_f32_bf16_scalar(<uint16_t*>d + k, <const uint32_t*>s + k, n - k)
    else:
        if vec:
            k = hv_cast_bf16_f32_simd(<uint32_t*>d, <const uint16_t*>s, n)
        hv_cast_bf16_f32_scalar(<uint32_t*>d + k, <const uint16_t*>s + k, n - k)


cdef int cast_arrays(cnp.ndarray src, cnp.ndarray dst) except -1:
    cdef int kind = _kind(src, dst)
    _check(src, dst)
    cdef size_t n = <size_t>cnp.PyArray_SIZE(src)
    cdef void* d = cnp.PyArray_DATA(dst)
    cdef const void* s = cnp.PyArray_DATA(src)
    cdef bint vec = hv_cpu_cast_simd()
    if n >= <size_t>NOGIL_MIN:
        with nogil:
            _run(kind, d, s, n, vec)
    elif n:
        _run(kind, d, s, n, vec)
    return 0


def cast_into(cnp.ndarray src not None, cnp.ndarray dst not None, bint simd=True):
    """dst[...] = src cast elementwise (float32 <-> float16/bfloat16, C-contiguous, the same
    number of elements, no overlap); returns dst. simd=False forces the scalar code (tests)."""
    if simd:
        cast_arrays(src, dst)
        return dst
    cdef int kind = _kind(src, dst)
    _check(src, dst)
    _run(kind, cnp.PyArray_DATA(dst), cnp.PyArray_DATA(src), <size_t>src.size, False)
    return dst
