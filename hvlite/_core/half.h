/* IEEE binary16 and bfloat16 <-> float32 conversions, round-to-nearest-even.
 * Reductions on 16-bit floats widen to float32, apply the op once, and round back: the same
 * arithmetic NumPy (float16) and ml_dtypes (bfloat16) use, so results match them bit for bit. */
#ifndef HVLITE_HALF_H
#define HVLITE_HALF_H
#include <stdint.h>
#include <string.h>

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
#endif
