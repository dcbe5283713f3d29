"""Reduction kernels: typed loops over raw buffers (reduce.pyx), half-precision conversions and
min/max that propagate NaN (half.h, minmax.h), stores that bypass the cache (stream.h); whole-array
float32 <-> float16/bfloat16 casts for the fp16/bf16 compression (cast.pyx)."""
