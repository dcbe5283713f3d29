/* A copy whose destination bypasses the cache (non-temporal stores), for results written into
 * memory the copy has not read: an ordinary store first reads each line it fills (24 MB of
 * fresh outputs a step read for nothing). Falls back to memcpy off x86-64 and for small or
 * misaligned tails. */
#ifndef HVLITE_STREAM_H
#define HVLITE_STREAM_H
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
static inline void hv_stream_copy(char* dst, const char* src, size_t n) {
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15, i;
    if (n < 4096) { memcpy(dst, src, n); return; }
    memcpy(dst, src, head);
    dst += head; src += head; n -= head;
    for (i = 0; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i*)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i*)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i*)(src + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i*)(src + i + 48));
        _mm_stream_si128((__m128i*)(dst + i), a);
        _mm_stream_si128((__m128i*)(dst + i + 16), b);
        _mm_stream_si128((__m128i*)(dst + i + 32), c);
        _mm_stream_si128((__m128i*)(dst + i + 48), d);
    }
    memcpy(dst + i, src + i, n - i);
    _mm_sfence();
}
#else
static inline void hv_stream_copy(char* dst, const char* src, size_t n) { memcpy(dst, src, n); }
#endif
#endif
