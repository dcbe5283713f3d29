/* Sum and Average's last step on float32 / float64, 8 or 4 lanes at a time where the CPU has
 * AVX (the build targets baseline x86-64, whose SSE2 loops move 16 bytes a store). Lane by lane
 * each is the scalar IEEE operation, so the bits are the scalar loop's.
 *  - hv_add: a[i] += b[i] (a and b never overlap: reduce_into's contract);
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
__attribute__((target("avx")))
static size_t hv_add_f32_avx(float* __restrict a, const float* __restrict b, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x = _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
        __m256 y = _mm256_add_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
        _mm256_storeu_ps(a + i, x);
        _mm256_storeu_ps(a + i + 8, y);
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    return i;
}
__attribute__((target("avx")))
static size_t hv_add_f64_avx(double* __restrict a, const double* __restrict b, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256d x = _mm256_add_pd(_mm256_loadu_pd(a + i), _mm256_loadu_pd(b + i));
        __m256d y = _mm256_add_pd(_mm256_loadu_pd(a + i + 4), _mm256_loadu_pd(b + i + 4));
        _mm256_storeu_pd(a + i, x);
        _mm256_storeu_pd(a + i + 4, y);
    }
    for (; i + 4 <= n; i += 4) _mm256_storeu_pd(a + i, _mm256_add_pd(_mm256_loadu_pd(a + i), _mm256_loadu_pd(b + i)));
    return i;
}
__attribute__((target("avx")))
static size_t hv_scale_f32_avx(float* dst, const float* src, size_t n, float r) {
    __m256 v = _mm256_set1_ps(r);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 a = _mm256_loadu_ps(src + i), b = _mm256_loadu_ps(src + i + 8);
        __m256 c = _mm256_loadu_ps(src + i + 16), d = _mm256_loadu_ps(src + i + 24);
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(a, v));
        _mm256_storeu_ps(dst + i + 8, _mm256_mul_ps(b, v));
        _mm256_storeu_ps(dst + i + 16, _mm256_mul_ps(c, v));
        _mm256_storeu_ps(dst + i + 24, _mm256_mul_ps(d, v));
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_loadu_ps(src + i), v));
    return i;
}
__attribute__((target("avx")))
static size_t hv_scale_f64_avx(double* dst, const double* src, size_t n, double r) {
    __m256d v = _mm256_set1_pd(r);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256d a = _mm256_loadu_pd(src + i), b = _mm256_loadu_pd(src + i + 4);
        __m256d c = _mm256_loadu_pd(src + i + 8), d = _mm256_loadu_pd(src + i + 12);
        _mm256_storeu_pd(dst + i, _mm256_mul_pd(a, v));
        _mm256_storeu_pd(dst + i + 4, _mm256_mul_pd(b, v));
        _mm256_storeu_pd(dst + i + 8, _mm256_mul_pd(c, v));
        _mm256_storeu_pd(dst + i + 12, _mm256_mul_pd(d, v));
    }
    for (; i + 4 <= n; i += 4) _mm256_storeu_pd(dst + i, _mm256_mul_pd(_mm256_loadu_pd(src + i), v));
    return i;
}
static inline size_t hv_add_f32(float* a, const float* b, size_t n) {
    return hv_cpu_avx() ? hv_add_f32_avx(a, b, n) : 0;
}
static inline size_t hv_add_f64(double* a, const double* b, size_t n) {
    return hv_cpu_avx() ? hv_add_f64_avx(a, b, n) : 0;
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
static inline size_t hv_scale_f32(float* dst, const float* src, size_t n, float r) {
    (void)dst; (void)src; (void)n; (void)r; return 0;
}
static inline size_t hv_scale_f64(double* dst, const double* src, size_t n, double r) {
    (void)dst; (void)src; (void)n; (void)r; return 0;
}
#endif
#endif
