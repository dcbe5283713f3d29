/* A copy whose destination bypasses the cache (non-temporal stores), for results written into
 * memory the copy has not read: an ordinary store first reads each line it fills (24 MB of
 * fresh outputs a step read for nothing). Whole lines in one or two stores (AVX-512, AVX): on
 * the 2-vCPU Xeon 16-byte streaming stores wrote 11 GB/s, 32- and 64-byte ones 20 GB/s. While it
 * stores, it can bring the lines the caller reads next toward the cache, one line per line
 * stored (`ahead`): the stores wait on memory, and so would those reads
 * (docs/benchmarks.md, "Out of place from 8 MiB: wider stores, reads ahead"). Falls back to
 * memcpy off x86-64 and for small copies and the tails. */
#ifndef HVLITE_STREAM_H
#define HVLITE_STREAM_H
#include <stdint.h>
#include <string.h>

/* what to prefetch while storing: `left` bytes from `at`, taken as they are prefetched */
typedef struct { const char* at; size_t left; } hv_prefetch;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* one line of `pf` toward L2 (not L1: the stores' source lives there) */
static inline void hv_ahead(hv_prefetch* pf) {
    if (pf != NULL && pf->left >= 64) {
        _mm_prefetch(pf->at, _MM_HINT_T1);
        pf->at += 64;
        pf->left -= 64;
    }
}

/* 2: AVX-512, 1: AVX, 0: SSE2 only (tests force one: hv_stream_force); found on first use by
 * whichever thread comes first (relaxed: every thread finds the same). 64-byte stores ran 2-7%
 * faster than 32-byte ones out of place at 64 MiB (5 of 6 launches); they are taken only where
 * the CPU also has VBMI2 (Ice Lake on, Zen 4 on): on the Xeons before, any 512-bit instruction
 * lowers the core's clock, for the compute beside it too. */
static int hv_stream_level = -1;

static inline int hv_stream_width(void) {
    int w = __atomic_load_n(&hv_stream_level, __ATOMIC_RELAXED);
    if (w < 0) {
        w = (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vbmi2")) ? 2
            : __builtin_cpu_supports("avx") ? 1 : 0;
        __atomic_store_n(&hv_stream_level, w, __ATOMIC_RELAXED);
    }
    return w;
}

__attribute__((target("avx512f")))
static void hv_stream_lines_avx512(char* dst, const char* src, size_t n, hv_prefetch* pf) {
    size_t i;
    for (i = 0; i + 64 <= n; i += 64) {
        hv_ahead(pf);
        _mm512_stream_si512((__m512i*)(dst + i), _mm512_loadu_si512((const void*)(src + i)));
    }
}

__attribute__((target("avx")))
static void hv_stream_lines_avx(char* dst, const char* src, size_t n, hv_prefetch* pf) {
    size_t i;
    for (i = 0; i + 64 <= n; i += 64) {
        hv_ahead(pf);
        __m256i a = _mm256_loadu_si256((const __m256i*)(src + i));
        __m256i b = _mm256_loadu_si256((const __m256i*)(src + i + 32));
        _mm256_stream_si256((__m256i*)(dst + i), a);
        _mm256_stream_si256((__m256i*)(dst + i + 32), b);
    }
}

static void hv_stream_lines_sse2(char* dst, const char* src, size_t n, hv_prefetch* pf) {
    size_t i;
    for (i = 0; i + 64 <= n; i += 64) {
        hv_ahead(pf);
        __m128i a = _mm_loadu_si128((const __m128i*)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i*)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i*)(src + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i*)(src + i + 48));
        _mm_stream_si128((__m128i*)(dst + i), a);
        _mm_stream_si128((__m128i*)(dst + i + 16), b);
        _mm_stream_si128((__m128i*)(dst + i + 32), c);
        _mm_stream_si128((__m128i*)(dst + i + 48), d);
    }
}

/* dst's whole lines are stored past the cache, its partial first and last lines by memcpy;
 * `ahead` (or NULL): lines to prefetch meanwhile */
static inline void hv_stream_copy_ahead(char* dst, const char* src, size_t n, hv_prefetch* ahead) {
    size_t head = (64 - ((uintptr_t)dst & 63)) & 63, body;
    int w;
    if (n < 4096) { memcpy(dst, src, n); return; }
    memcpy(dst, src, head);
    dst += head; src += head; n -= head;
    body = n & ~(size_t)63;
    w = hv_stream_width();
    if (w == 2) hv_stream_lines_avx512(dst, src, body, ahead);
    else if (w == 1) hv_stream_lines_avx(dst, src, body, ahead);
    else hv_stream_lines_sse2(dst, src, body, ahead);
    memcpy(dst + body, src + body, n - body);
    _mm_sfence();
}

/* tests: run every width on this CPU (a level it lacks is not forced) */
static inline int hv_stream_force(int level) {
    int had = hv_stream_width();
    if (level >= 0 && level <= 2) __atomic_store_n(&hv_stream_level, level, __ATOMIC_RELAXED);
    return had;
}
#else
static inline void hv_stream_copy_ahead(char* dst, const char* src, size_t n, hv_prefetch* ahead) {
    (void)ahead;
    memcpy(dst, src, n);
}
static inline int hv_stream_force(int level) { (void)level; return -1; }
#endif
#endif
