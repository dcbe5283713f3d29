/* IEEE binary16 and bfloat16 <-> float32 conversions, round-to-nearest-even.
 * Reductions on 16-bit floats widen to float32, apply the op once, and round back: the same
 * arithmetic NumPy (float16) and ml_dtypes (bfloat16) use, so results match them bit for bit. */
#ifndef HVLITE_HALF_H
#define HVLITE_HALF_H
#include <stdint.h>
#include <string.h>
#include "minmax.h"
#include "../codes.h"    /* the op codes */

static inline float hv_bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t hv_float_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float hv_bf16_to_float(uint16_t h) { return hv_bits_to_float(((uint32_t)h) << 16); }

static inline uint16_t hv_float_to_bf16(float f) {
    uint32_t u = hv_float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#if defined(__FLT16_MANT_DIG__) && !defined(HVLITE_NO_FLOAT16)
static inline float hv_half_to_float(uint16_t h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static inline uint16_t hv_float_to_half(float f) { _Float16 x = (_Float16)f; uint16_t h; memcpy(&h, &x, 2); return h; }
#else
static inline float hv_half_to_float(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) return hv_bits_to_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return hv_bits_to_float(sign);
        float v = (float)man * 5.9604644775390625e-08f; /* man * 2^-24 */
        return sign ? -v : v;
    }
    return hv_bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}
static inline uint16_t hv_float_to_half(float f) {
    uint32_t u = hv_float_to_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
    if (a < 0x38800000u) { /* subnormal half or zero: let the FPU round */
        float v = hv_bits_to_float(a) * 16777216.0f; /* scale by 2^24 */
        uint32_t m = (uint32_t)v; float r = v - (float)m;
        if (r > 0.5f || (r == 0.5f && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}
#endif
/* float16 with the F16C instructions, 8 at a time; the callers finish the tail with the scalar
 * code. The same conversions (round to nearest even) and the same float32 arithmetic as the
 * scalar path, so the bits agree; Min/Max follow minmax.h's rule on 8 lanes (any NaN gives the
 * default quiet NaN, which narrows to the 16-bit default; -0 below +0). Without F16C
 * the compiler would call a library routine per conversion: ~10x slower than float32. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(HVLITE_NO_F16C)
#include <immintrin.h>
#define HV_HAVE_F16C_PATH 1
static inline int hv_cpu_f16c(void) {
    static int known = -1;
    if (known < 0) known = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    return known;
}
__attribute__((target("avx,f16c")))
static size_t hv_half_reduce_f16c(uint16_t* a, const uint16_t* b, size_t n, int op) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(a + i)));
        __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(b + i)));
        __m256 r;
        if (op == OP_SUM) r = _mm256_add_ps(x, y);
        else if (op == OP_PRODUCT) r = _mm256_mul_ps(x, y);
        else if (op == OP_MIN) r = hv_f32x8_min(x, y);
        else r = hv_f32x8_max(x, y);
        _mm_storeu_si128((__m128i*)(a + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return i;
}
__attribute__((target("avx,f16c")))
static size_t hv_half_divide_f16c(uint16_t* a, size_t n, float d) {
    size_t i = 0;
    __m256 dv = _mm256_set1_ps(d);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(a + i)));
        _mm_storeu_si128((__m128i*)(a + i), _mm256_cvtps_ph(_mm256_div_ps(x, dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return i;
}
/* bfloat16 with AVX2, 8 at a time: widening is a shift, narrowing the scalar code's integer
 * rounding (to nearest even, NaN kept quiet) done on 8 lanes, so the bits agree. */
static inline int hv_cpu_avx2(void) {
    static int known = -1;
    if (known < 0) known = __builtin_cpu_supports("avx2");
    return known;
}
__attribute__((target("avx2")))
static inline __m256 hv_bf16x8_load(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
__attribute__((target("avx2")))
static inline void hv_bf16x8_store(uint16_t* p, __m256 r) {
    __m256i u = _mm256_castps_si256(r);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256i v = _mm256_blendv_epi8(rounded, quiet, nan);
    v = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0xD8);
    _mm_storeu_si128((__m128i*)p, _mm256_castsi256_si128(v));
}
__attribute__((target("avx2")))
static size_t hv_bf16_reduce_avx2(uint16_t* a, const uint16_t* b, size_t n, int op) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = hv_bf16x8_load(a + i), y = hv_bf16x8_load(b + i), r;
        if (op == OP_SUM) r = _mm256_add_ps(x, y);
        else if (op == OP_PRODUCT) r = _mm256_mul_ps(x, y);
        else if (op == OP_MIN) r = hv_f32x8_min(x, y);
        else r = hv_f32x8_max(x, y);
        hv_bf16x8_store(a + i, r);
    }
    return i;
}
__attribute__((target("avx2")))
static size_t hv_bf16_divide_avx2(uint16_t* a, size_t n, float d) {
    size_t i = 0;
    __m256 dv = _mm256_set1_ps(d);
    for (; i + 8 <= n; i += 8) hv_bf16x8_store(a + i, _mm256_div_ps(hv_bf16x8_load(a + i), dv));
    return i;
}
#else
#define HV_HAVE_F16C_PATH 0
static inline int hv_cpu_avx2(void) { return 0; }
static inline size_t hv_bf16_reduce_avx2(uint16_t* a, const uint16_t* b, size_t n, int op) { (void)a; (void)b; (void)n; (void)op; return 0; }
static inline size_t hv_bf16_divide_avx2(uint16_t* a, size_t n, float d) { (void)a; (void)n; (void)d; return 0; }
static inline int hv_cpu_f16c(void) { return 0; }
static inline size_t hv_half_reduce_f16c(uint16_t* a, const uint16_t* b, size_t n, int op) { (void)a; (void)b; (void)n; (void)op; return 0; }
static inline size_t hv_half_divide_f16c(uint16_t* a, size_t n, float d) { (void)a; (void)n; (void)d; return 0; }
#endif

/* Whole-array casts (the fp16/bf16 compression): bit for bit NumPy's float16 astype (a NaN keeps
 * its payload and is never quieted, as NumPy's integer code does) and ml_dtypes' bfloat16 (any NaN
 * becomes the quiet NaN of its sign). Integer code only, so no MXCSR mode or FP flag changes a bit. */
static inline uint16_t hv_f32_to_f16_np(uint32_t f) {
    uint32_t sign = (f >> 16) & 0x8000u, a = f & 0x7fffffffu, sig = f & 0x7fffffu;
    if (a > 0x7f800000u) { uint32_t m = sig >> 13; return (uint16_t)(sign | 0x7c00u | (m ? m : 1u)); }
    if (a >= 0x47800000u) return (uint16_t)(sign | 0x7c00u);            /* inf, or overflow */
    if (a < 0x33000000u) return (uint16_t)sign;                          /* below half a subnormal */
    if ((a >> 23) <= 112u) {                                             /* a subnormal half */
        uint32_t e = a >> 23, m = (0x800000u | sig) >> (113u - e);
        if ((m & 0x3fffu) != 0x1000u || (f & 0x7ffu)) m += 0x1000u;
        return (uint16_t)(sign | (m >> 13));
    }
    uint32_t m = sig;
    if ((m & 0x3fffu) != 0x1000u) m += 0x1000u;
    return (uint16_t)(sign | ((((a >> 23) - 112u) << 10) + (m >> 13)));
}
static inline uint32_t hv_f16_to_f32_np(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return sign | 0x7f800000u | (m << 13);
    if (e) return sign | ((e + 112u) << 23) | (m << 13);
    if (!m) return sign;
    int shift = __builtin_clz(m) - 21;                                   /* to bring bit 10 up */
    return sign | ((uint32_t)(113 - shift) << 23) | (((m << shift) & 0x3ffu) << 13);
}
static inline uint16_t hv_f32_to_bf16_ml(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static void hv_cast_f32_f16_scalar(uint16_t* d, const uint32_t* s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = hv_f32_to_f16_np(s[i]);
}
static void hv_cast_f16_f32_scalar(uint32_t* d, const uint16_t* s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = hv_f16_to_f32_np(s[i]);
}
static void hv_cast_f32_bf16_scalar(uint16_t* d, const uint32_t* s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = hv_f32_to_bf16_ml(s[i]);
}
static void hv_cast_bf16_f32_scalar(uint32_t* d, const uint16_t* s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = (uint32_t)s[i] << 16;
}
/* The same casts 8 lanes at a time (F16C converts, AVX2 for bfloat16); each returns how many it
 * did, the caller finishes the tail with the scalar code. F16C quiets a signalling NaN where NumPy
 * keeps it, so a block holding a NaN goes through the scalar code instead (rare: one test a block). */
#if HV_HAVE_F16C_PATH
static inline int hv_cpu_cast_simd(void) { return hv_cpu_f16c() && hv_cpu_avx2(); }
__attribute__((target("avx2,f16c")))
static size_t hv_cast_f32_f16_simd(uint16_t* d, const uint32_t* s, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps((const float*)(s + i));
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) hv_cast_f32_f16_scalar(d + i, s + i, 8);
        else _mm_storeu_si128((__m128i*)(d + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return i;
}
__attribute__((target("avx2,f16c")))
static size_t hv_cast_f16_f32_simd(uint32_t* d, const uint16_t* s, size_t n) {
    size_t i = 0;
    const __m128i abs = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i*)(s + i));
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, abs), inf))) hv_cast_f16_f32_scalar(d + i, s + i, 8);
        else _mm256_storeu_ps((float*)(d + i), _mm256_cvtph_ps(h));
    }
    return i;
}
__attribute__((target("avx2")))
static size_t hv_cast_f32_bf16_simd(uint16_t* d, const uint32_t* s, size_t n) {
    size_t i = 0;
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i hsign = _mm256_set1_epi32(0x8000), qnan = _mm256_set1_epi32(0x7fc0);
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i*)(s + i));
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        __m256i hi = _mm256_srli_epi32(u, 16);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
        __m256i q = _mm256_or_si256(_mm256_and_si256(hi, hsign), qnan);
        __m256i v = _mm256_blendv_epi8(r, q, nan);
        v = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0xD8);
        _mm_storeu_si128((__m128i*)(d + i), _mm256_castsi256_si128(v));
    }
    return i;
}
__attribute__((target("avx2")))
static size_t hv_cast_bf16_f32_simd(uint32_t* d, const uint16_t* s, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(s + i)));
        _mm256_storeu_si256((__m256i*)(d + i), _mm256_slli_epi32(w, 16));
    }
    return i;
}
#else
static inline int hv_cpu_cast_simd(void) { return 0; }
static inline size_t hv_cast_f32_f16_simd(uint16_t* d, const uint32_t* s, size_t n) { (void)d; (void)s; (void)n; return 0; }
static inline size_t hv_cast_f16_f32_simd(uint32_t* d, const uint16_t* s, size_t n) { (void)d; (void)s; (void)n; return 0; }
static inline size_t hv_cast_f32_bf16_simd(uint16_t* d, const uint32_t* s, size_t n) { (void)d; (void)s; (void)n; return 0; }
static inline size_t hv_cast_bf16_f32_simd(uint32_t* d, const uint16_t* s, size_t n) { (void)d; (void)s; (void)n; return 0; }
#endif
/* float32 buffers reduced as 16-bit floats ("float32 as float16" and "as bfloat16": the fp16/bf16
 * compression on one node, codes.h). Each operand is rounded as the compression's cast rounds it
 * (NumPy's float16, ml_dtypes' bfloat16), the op is applied as the 16-bit kernels above apply it,
 * and the result is rounded to 16 bits and stored widened: the cast, the 16-bit reduction and the
 * cast back, bit for bit, with no 16-bit array and no pass of its own. A value already rounded
 * rounds to itself, so partial results go on through the same kernels. 8 lanes at a time (16
 * for float16 Sum and Product with AVX-512) where no lane holds a NaN (F16C/AVX2 round to
 * nearest even as the scalar code does); a block with a NaN takes the scalar code, as the
 * casts do. */
static inline float hv_f32h_op(float x, float y, int op) {
    if (op == OP_SUM) return x + y;
    if (op == OP_PRODUCT) return x * y;
    return op == OP_MIN ? hv_minf(x, y) : hv_maxf(x, y);
}
static inline uint16_t hv_f32h_narrow(float v) { return hv_f32_to_f16_np(hv_float_to_bits(v)); }
static inline float hv_f32h_widen(uint16_t h) { return hv_bits_to_float(hv_f16_to_f32_np(h)); }
static inline uint16_t hv_f32b_narrow(float v) { return hv_f32_to_bf16_ml(hv_float_to_bits(v)); }
static inline float hv_f32b_widen(uint16_t h) { return hv_bits_to_float((uint32_t)h << 16); }
static void hv_f32h_reduce_scalar(float* d, const float* a, const float* b, size_t n, int op,
                                  int brain) {
    for (size_t i = 0; i < n; i++) {
        if (brain) {
            float x = hv_bf16_to_float(hv_f32b_narrow(a[i])), y = hv_bf16_to_float(hv_f32b_narrow(b[i]));
            d[i] = hv_f32b_widen(hv_float_to_bf16(hv_f32h_op(x, y, op)));
        } else {
            float x = hv_half_to_float(hv_f32h_narrow(a[i])), y = hv_half_to_float(hv_f32h_narrow(b[i]));
            d[i] = hv_f32h_widen(hv_float_to_half(hv_f32h_op(x, y, op)));
        }
    }
}
static void hv_f32h_divide_scalar(float* a, size_t n, float d, int brain) {
    for (size_t i = 0; i < n; i++) {
        if (brain) a[i] = hv_f32b_widen(hv_float_to_bf16(hv_bf16_to_float(hv_f32b_narrow(a[i])) / d));
        else a[i] = hv_f32h_widen(hv_float_to_half(hv_half_to_float(hv_f32h_narrow(a[i])) / d));
    }
}
#if HV_HAVE_F16C_PATH
__attribute__((target("avx2,f16c")))
static inline __m256 hv_f32h_round8(__m256 v, int brain) {
    if (!brain) return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xffff0000u)));
}
static inline int hv_cpu_avx512(void) {
    static int known = -1;
    if (known < 0) known = __builtin_cpu_supports("avx512f");
    return known;
}
/* float16 Sum and Product 16 lanes at a time (half the conversions' instructions of the 8-lane
 * loop); bfloat16's rounding is integer work, left to the 8-lane loop. */
__attribute__((target("avx512f")))
static size_t hv_f32h_reduce_avx512(float* d, const float* a, const float* b, size_t n, int op) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(a + i), y = _mm512_loadu_ps(b + i), r;
        if (_mm512_cmp_ps_mask(x, y, _CMP_UNORD_Q)) {
            hv_f32h_reduce_scalar(d + i, a + i, b + i, 16, op, 0);
            continue;
        }
        x = _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        y = _mm512_cvtph_ps(_mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        r = op == OP_SUM ? _mm512_add_ps(x, y) : _mm512_mul_ps(x, y);
        if (_mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q)) {      /* inf - inf, 0 * inf: a NaN made */
            hv_f32h_reduce_scalar(d + i, a + i, b + i, 16, op, 0);
            continue;
        }
        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
    return i;
}
/* d = a (op) b as 16-bit values; d may be a. */
__attribute__((target("avx2,f16c")))
static size_t hv_f32h_reduce_simd(float* d, const float* a, const float* b, size_t n, int op,
                                  int brain) {
    size_t i = !brain && (op == OP_SUM || op == OP_PRODUCT) && hv_cpu_avx512() ? hv_f32h_reduce_avx512(d, a, b, n, op) : 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(a + i), y = _mm256_loadu_ps(b + i), r;
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, y, _CMP_UNORD_Q))) {
            hv_f32h_reduce_scalar(d + i, a + i, b + i, 8, op, brain);
            continue;
        }
        x = hv_f32h_round8(x, brain);
        y = hv_f32h_round8(y, brain);
        if (op == OP_SUM) r = _mm256_add_ps(x, y);
        else if (op == OP_PRODUCT) r = _mm256_mul_ps(x, y);
        else if (op == OP_MIN) r = hv_f32x8_min(x, y);
        else r = hv_f32x8_max(x, y);
        if (_mm256_movemask_ps(_mm256_cmp_ps(r, r, _CMP_UNORD_Q))) {   /* inf - inf: a NaN made */
            hv_f32h_reduce_scalar(d + i, a + i, b + i, 8, op, brain);
            continue;
        }
        _mm256_storeu_ps(d + i, hv_f32h_round8(r, brain));
    }
    return i;
}
/* Average's division; by a power of two as a multiplication by its exact reciprocal (the same
 * real number, so the same rounding: a vector divide costs ~10 multiplies). */
__attribute__((target("avx2,f16c")))
static size_t hv_f32h_divide_simd(float* a, size_t n, float d, int brain) {
    size_t i = 0;
    unsigned long u = d >= 1.0f ? (unsigned long)d : 0;
    int pow2 = u && (float)u == d && (u & (u - 1)) == 0;
    __m256 dv = _mm256_set1_ps(d), rv = _mm256_set1_ps(1.0f / d);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(a + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) {
            hv_f32h_divide_scalar(a + i, 8, d, brain);
            continue;
        }
        x = hv_f32h_round8(x, brain);
        x = pow2 ? _mm256_mul_ps(x, rv) : _mm256_div_ps(x, dv);
        _mm256_storeu_ps(a + i, hv_f32h_round8(x, brain));
    }
    return i;
}
#else
static inline size_t hv_f32h_reduce_simd(float* d, const float* a, const float* b, size_t n, int op, int brain) { (void)d; (void)a; (void)b; (void)n; (void)op; (void)brain; return 0; }
static inline size_t hv_f32h_divide_simd(float* a, size_t n, float d, int brain) { (void)a; (void)n; (void)d; (void)brain; return 0; }
#endif
#endif
