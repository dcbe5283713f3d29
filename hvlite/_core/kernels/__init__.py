"""Reduction kernels: typed loops over raw buffers (reduce.pyx), half-precision conversions and
min/max that propagate NaN (half.h, minmax.h), stores that bypass the cache (stream.h)."""
