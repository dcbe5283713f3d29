/* Min and Max on floats, with the same bits whatever order the operands come in, so every
 * reduction order (every algorithm, MPI's own included) gives every rank the same result:
 *  - any NaN operand gives the dtype's default quiet NaN (NumPy's minimum/maximum propagate NaN;
 *    one canonical NaN keeps the order from choosing whose payload survives);
 *  - -0 counts as below +0: Min(-0, +0) = -0 and Max(-0, +0) = +0 (NumPy returns its first
 *    argument for equal values, which would make the result depend on the order).
 * Equal non-zero values have equal bits, so OR (Min) / AND (Max) of the bits of equal operands
 * settles the zeros without a branch. */
#ifndef HVLITE_MINMAX_H
#define HVLITE_MINMAX_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HV_F32_QNAN 0x7fc00000u
#define HV_F64_QNAN 0x7ff8000000000000ull

static inline float hv_minf(float x, float y) {
    uint32_t xi, yi, r; float f;
    memcpy(&xi, &x, 4); memcpy(&yi, &y, 4);
    r = y < x ? yi : xi;
    r = x == y ? (xi | yi) : r;
    r = (x != x) | (y != y) ? HV_F32_QNAN : r;
    memcpy(&f, &r, 4);
    return f;
}

static inline float hv_maxf(float x, float y) {
    uint32_t xi, yi, r; float f;
    memcpy(&xi, &x, 4); memcpy(&yi, &y, 4);
    r = y > x ? yi : xi;
    r = x == y ? (xi & yi) : r;
    r = (x != x) | (y != y) ? HV_F32_QNAN : r;
    memcpy(&f, &r, 4);
    return f;
}

static inline double hv_mind(double x, double y) {
    uint64_t xi, yi, r; double f;
    memcpy(&xi, &x, 8); memcpy(&yi, &y, 8);
    r = y < x ? yi : xi;
    r = x == y ? (xi | yi) : r;
    r = (x != x) | (y != y) ? HV_F64_QNAN : r;
    memcpy(&f, &r, 8);
    return f;
}

static inline double hv_maxd(double x, double y) {
    uint64_t xi, yi, r; double f;
    memcpy(&xi, &x, 8); memcpy(&yi, &y, 8);
    r = y > x ? yi : xi;
    r = x == y ? (xi & yi) : r;
    r = (x != x) | (y != y) ? HV_F64_QNAN : r;
    memcpy(&f, &r, 8);
    return f;
}

/* The same rule on whole vectors. MIN/MAX instructions return their second operand for equal
 * values and NaN, so taking them both ways round and OR-ing (Min) / AND-ing (Max) the two gives
 * x | y / x & y on equal lanes and the plain minimum/maximum elsewhere; NaN lanes then take the
 * default NaN. x86-64 always has SSE2; AVX, where the CPU has it, does twice the lanes per
 * instruction (GCC does not vectorize the scalar form for doubles without AVX). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HV_MINMAX_VEC(NAME, V, ATTR, MIN, MAX, UN, AND, OR, SELECT, QNAN) \
ATTR static inline V NAME##_min(V x, V y) { \
    return SELECT(OR(MIN(x, y), MIN(y, x)), QNAN, UN(x, y)); \
} \
ATTR static inline V NAME##_max(V x, V y) { \
    return SELECT(AND(MAX(x, y), MAX(y, x)), QNAN, UN(x, y)); \
}
#define HV_AVX __attribute__((target("avx")))
#define HV_UN8(x, y) _mm256_cmp_ps(x, y, _CMP_UNORD_Q)
#define HV_UN4D(x, y) _mm256_cmp_pd(x, y, _CMP_UNORD_Q)
#define HV_SELECT4(a, b, m) _mm_or_ps(_mm_andnot_ps(m, a), _mm_and_ps(m, b))
#define HV_SELECT2D(a, b, m) _mm_or_pd(_mm_andnot_pd(m, a), _mm_and_pd(m, b))
#define HV_SELECT8(a, b, m) _mm256_or_ps(_mm256_andnot_ps(m, a), _mm256_and_ps(m, b))
#define HV_SELECT4D(a, b, m) _mm256_or_pd(_mm256_andnot_pd(m, a), _mm256_and_pd(m, b))
HV_MINMAX_VEC(hv_f32x4, __m128, , _mm_min_ps, _mm_max_ps, _mm_cmpunord_ps, _mm_and_ps, _mm_or_ps,
              HV_SELECT4, _mm_castsi128_ps(_mm_set1_epi32((int)HV_F32_QNAN)))
HV_MINMAX_VEC(hv_f64x2, __m128d, , _mm_min_pd, _mm_max_pd, _mm_cmpunord_pd, _mm_and_pd, _mm_or_pd,
              HV_SELECT2D, _mm_castsi128_pd(_mm_set1_epi64x((long long)HV_F64_QNAN)))
HV_MINMAX_VEC(hv_f32x8, __m256, HV_AVX, _mm256_min_ps, _mm256_max_ps, HV_UN8, _mm256_and_ps,
              _mm256_or_ps, HV_SELECT8, _mm256_castsi256_ps(_mm256_set1_epi32((int)HV_F32_QNAN)))
HV_MINMAX_VEC(hv_f64x4, __m256d, HV_AVX, _mm256_min_pd, _mm256_max_pd, HV_UN4D, _mm256_and_pd,
              _mm256_or_pd, HV_SELECT4D, _mm256_castsi256_pd(_mm256_set1_epi64x((long long)HV_F64_QNAN)))
static inline int hv_cpu_avx(void) {
    static int known = -1;
    if (known < 0) known = __builtin_cpu_supports("avx");
    return known;
}
/* One loop per (type, op, width); each returns how far it got, the scalar code does the rest. */
#define HV_MINMAX_LOOP(FN, T, ATTR, VEC, LANES, LOAD, STORE) \
ATTR static size_t FN(T* __restrict a, const T* __restrict b, size_t n) { \
    size_t i = 0; \
    for (; i + LANES <= n; i += LANES) STORE(a + i, VEC(LOAD(a + i), LOAD(b + i))); \
    return i; \
}
HV_MINMAX_LOOP(hv_min_f32_sse, float, , hv_f32x4_min, 4, _mm_loadu_ps, _mm_storeu_ps)
HV_MINMAX_LOOP(hv_max_f32_sse, float, , hv_f32x4_max, 4, _mm_loadu_ps, _mm_storeu_ps)
HV_MINMAX_LOOP(hv_min_f64_sse, double, , hv_f64x2_min, 2, _mm_loadu_pd, _mm_storeu_pd)
HV_MINMAX_LOOP(hv_max_f64_sse, double, , hv_f64x2_max, 2, _mm_loadu_pd, _mm_storeu_pd)
HV_MINMAX_LOOP(hv_min_f32_avx, float, HV_AVX, hv_f32x8_min, 8, _mm256_loadu_ps, _mm256_storeu_ps)
HV_MINMAX_LOOP(hv_max_f32_avx, float, HV_AVX, hv_f32x8_max, 8, _mm256_loadu_ps, _mm256_storeu_ps)
HV_MINMAX_LOOP(hv_min_f64_avx, double, HV_AVX, hv_f64x4_min, 4, _mm256_loadu_pd, _mm256_storeu_pd)
HV_MINMAX_LOOP(hv_max_f64_avx, double, HV_AVX, hv_f64x4_max, 4, _mm256_loadu_pd, _mm256_storeu_pd)
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(HVLITE_NO_SIMD_MINMAX)
#define HV_VEC_START(OP, SUFFIX) (hv_cpu_avx() ? hv_##OP##_##SUFFIX##_avx(a, b, n) : hv_##OP##_##SUFFIX##_sse(a, b, n))
#else
#define HV_VEC_START(OP, SUFFIX) 0     /* the scalar loop does it all */
#endif

/* a[i] = op(a[i], b[i]); a and b never overlap (reduce_into's contract). */
#define HV_MINMAX_KERNEL(OP, SUFFIX, T, SCALAR) \
static void hv_##OP##_##SUFFIX(T* __restrict a, const T* __restrict b, size_t n) { \
    for (size_t i = HV_VEC_START(OP, SUFFIX); i < n; i++) a[i] = SCALAR(a[i], b[i]); \
}
HV_MINMAX_KERNEL(min, f32, float, hv_minf)
HV_MINMAX_KERNEL(max, f32, float, hv_maxf)
HV_MINMAX_KERNEL(min, f64, double, hv_mind)
HV_MINMAX_KERNEL(max, f64, double, hv_maxd)
#endif
