/* IEEE binary16 and bfloat16 <-> float32 conversions, round-to-nearest-even.
 * Reductions on 16-bit floats widen to float32, apply the op once, and round back: the same
 * arithmetic NumPy (float16) and ml_dtypes (bfloat16) use, so results match them bit for bit. */
#ifndef HVLITE_HALF_H
#define HVLITE_HALF_H
#include <stdint.h>
#include <string.h>
#include "minmax.h"

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
        if (op == 0) r = _mm256_add_ps(x, y);
        else if (op == 4) r = _mm256_mul_ps(x, y);
        else if (op == 2) r = hv_f32x8_min(x, y);
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
        if (op == 0) r = _mm256_add_ps(x, y);
        else if (op == 4) r = _mm256_mul_ps(x, y);
        else if (op == 2) r = hv_f32x8_min(x, y);
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
#endif
