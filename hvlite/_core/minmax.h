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

/* The same rule on whole vectors: MIN/MAX instructions return their second operand for equal
 * values and NaN, so the equal lanes then OR (Min) / AND (Max) in the first operand's bits, and
 * NaN lanes take the default NaN. x86-64 always has SSE2; AVX, where the CPU has it, does twice
 * the lanes per instruction (GCC does not vectorize the scalar form for doubles without AVX). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(HVLITE_NO_SIMD_MINMAX)
#include <immintrin.h>
#define HV_MINMAX_VEC(NAME, V, ATTR, MIN, MAX, EQ, UN, AND, OR, ANDNOT, QNAN) \
ATTR static inline V NAME##_min(V x, V y) { \
    V r = OR(MIN(x, y), AND(EQ(x, y), x));      /* equal: x | y (-0 wins) */ \
    V un = UN(x, y); \
    return OR(ANDNOT(un, r), AND(un, QNAN)); \
} \
ATTR static inline V NAME##_max(V x, V y) { \
    V r = MAX(x, y); \
    r = ANDNOT(ANDNOT(x, EQ(x, y)), r);         /* equal: x & y (+0 wins) */ \
    V un = UN(x, y); \
    return OR(ANDNOT(un, r), AND(un, QNAN)); \
}
#define HV_AVX __attribute__((target("avx")))
#define HV_EQ8(x, y) _mm256_cmp_ps(x, y, _CMP_EQ_OQ)
#define HV_UN8(x, y) _mm256_cmp_ps(x, y, _CMP_UNORD_Q)
#define HV_EQ4D(x, y) _mm256_cmp_pd(x, y, _CMP_EQ_OQ)
#define HV_UN4D(x, y) _mm256_cmp_pd(x, y, _CMP_UNORD_Q)
HV_MINMAX_VEC(hv_f32x4, __m128, , _mm_min_ps, _mm_max_ps, _mm_cmpeq_ps, _mm_cmpunord_ps,
              _mm_and_ps, _mm_or_ps, _mm_andnot_ps, _mm_castsi128_ps(_mm_set1_epi32((int)HV_F32_QNAN)))
HV_MINMAX_VEC(hv_f64x2, __m128d, , _mm_min_pd, _mm_max_pd, _mm_cmpeq_pd, _mm_cmpunord_pd,
              _mm_and_pd, _mm_or_pd, _mm_andnot_pd, _mm_castsi128_pd(_mm_set1_epi64x((long long)HV_F64_QNAN)))
HV_MINMAX_VEC(hv_f32x8, __m256, HV_AVX, _mm256_min_ps, _mm256_max_ps, HV_EQ8, HV_UN8,
              _mm256_and_ps, _mm256_or_ps, _mm256_andnot_ps,
              _mm256_castsi256_ps(_mm256_set1_epi32((int)HV_F32_QNAN)))
HV_MINMAX_VEC(hv_f64x4, __m256d, HV_AVX, _mm256_min_pd, _mm256_max_pd, HV_EQ4D, HV_UN4D,
              _mm256_and_pd, _mm256_or_pd, _mm256_andnot_pd,
              _mm256_castsi256_pd(_mm256_set1_epi64x((long long)HV_F64_QNAN)))
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
#define HV_VEC_START(OP, SUFFIX) (hv_cpu_avx() ? hv_##OP##_##SUFFIX##_avx(a, b, n) : hv_##OP##_##SUFFIX##_sse(a, b, n))
#else
#define HV_VEC_START(OP, SUFFIX) 0
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
