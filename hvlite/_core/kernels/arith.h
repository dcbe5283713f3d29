/* Sum and Average's last step on float32 / float64, 8 or 4 lanes at a time where the CPU has
 * AVX (the build targets baseline x86-64, whose SSE2 loops move 16 bytes a store). Lane by lane
 * each is the scalar IEEE operation, so the bits are the scalar loop's.
 *  - hv_add: a[i] += b[i] (a and b never overlap: reduce_into's contract);
 *  - hv_add3: dst[i] = a[i] + b[i] (dst overlaps neither: reduce_to's contract), an
 *    out-of-place result in one pass instead of a copy and then a sum;
 *  - hv_scale: dst[i] = src[i] * r, Average's divide where the divisor is a power of two (1/d
 *    is exact, so the product is the quotient, bit for bit). `dst` is `src` (in place) or does
 *    not overlap it: a result written while it is copied costs the divide no pass of its own.
 * Each returns how far it got; the caller's scalar loop does the rest (all of it on other
 * CPUs). */
#ifndef HVLITE_ARITH_H
#define HVLITE_ARITH_H
#include <stddef.h>
#include "minmax.h"     /* hv_cpu_avx */

#if defined(__x86_64__) && defined(__GNUC__)
/* One loop per (op, type): two vectors a turn, then one, then the caller's scalar tail. Each
 * turn loads before it stores, so each may run in place (hv_add is hv_add3 with dst = a). */
#define HV_ADD3_LOOP(FN, T, V, LANES, LOAD, STORE, ADD) \
__attribute__((target("avx"))) \
static size_t FN(T* dst, const T* a, const T* b, size_t n) { \
    size_t i = 0; \
    for (; i + 2 * LANES <= n; i += 2 * LANES) { \
        V x = ADD(LOAD(a + i), LOAD(b + i)), y = ADD(LOAD(a + i + LANES), LOAD(b + i + LANES)); \
        STORE(dst + i, x); \
        STORE(dst + i + LANES, y); \
    } \
    for (; i + LANES <= n; i += LANES) STORE(dst + i, ADD(LOAD(a + i), LOAD(b + i))); \
    return i; \
}
#define HV_SCALE_LOOP(FN, T, V, LANES, LOAD, STORE, MUL, SET1) \
__attribute__((target("avx"))) \
static size_t FN(T* dst, const T* src, size_t n, T r) { \
    V v = SET1(r); \
    size_t i = 0; \
    for (; i + 2 * LANES <= n; i += 2 * LANES) { \
        V x = MUL(LOAD(src + i), v), y = MUL(LOAD(src + i + LANES), v); \
        STORE(dst + i, x); \
        STORE(dst + i + LANES, y); \
    } \
    for (; i + LANES <= n; i += LANES) STORE(dst + i, MUL(LOAD(src + i), v)); \
    return i; \
}
HV_ADD3_LOOP(hv_add3_f32_avx, float, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_add_ps)
HV_ADD3_LOOP(hv_add3_f64_avx, double, __m256d, 4, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_add_pd)
HV_SCALE_LOOP(hv_scale_f32_avx, float, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_mul_ps,
              _mm256_set1_ps)
HV_SCALE_LOOP(hv_scale_f64_avx, double, __m256d, 4, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_mul_pd,
              _mm256_set1_pd)
static inline size_t hv_add_f32(float* a, const float* b, size_t n) {
    return hv_cpu_avx() ? hv_add3_f32_avx(a, a, b, n) : 0;
}
static inline size_t hv_add_f64(double* a, const double* b, size_t n) {
    return hv_cpu_avx() ? hv_add3_f64_avx(a, a, b, n) : 0;
}
static inline size_t hv_add3_f32(float* dst, const float* a, const float* b, size_t n) {
    return hv_cpu_avx() ? hv_add3_f32_avx(dst, a, b, n) : 0;
}
static inline size_t hv_add3_f64(double* dst, const double* a, const double* b, size_t n) {
    return hv_cpu_avx() ? hv_add3_f64_avx(dst, a, b, n) : 0;
}
static inline size_t hv_scale_f32(float* dst, const float* src, size_t n, float r) {
    return hv_cpu_avx() ? hv_scale_f32_avx(dst, src, n, r) : 0;
}
static inline size_t hv_scale_f64(double* dst, const double* src, size_t n, double r) {
    return hv_cpu_avx() ? hv_scale_f64_avx(dst, src, n, r) : 0;
}
#else
static inline size_t hv_add_f32(float* a, const float* b, size_t n) { (void)a; (void)b; (void)n; return 0; }
static inline size_t hv_add_f64(double* a, const double* b, size_t n) { (void)a; (void)b; (void)n; return 0; }
static inline size_t hv_add3_f32(float* dst, const float* a, const float* b, size_t n) {
    (void)dst; (void)a; (void)b; (void)n; return 0;
}
static inline size_t hv_add3_f64(double* dst, const double* a, const double* b, size_t n) {
    (void)dst; (void)a; (void)b; (void)n; return 0;
}
static inline size_t hv_scale_f32(float* dst, const float* src, size_t n, float r) {
    (void)dst; (void)src; (void)n; (void)r; return 0;
}
static inline size_t hv_scale_f64(double* dst, const double* src, size_t n, double r) {
    (void)dst; (void)src; (void)n; (void)r; return 0;
}
#endif
#endif
