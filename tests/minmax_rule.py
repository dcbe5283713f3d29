"""The documented Min/Max rule for floats, in NumPy, for the in-process and the rank-side tests.

NumPy's minimum/maximum propagate NaN (kept), but return their first argument for equal values,
so Min(+0, -0) depends on the order; hvlite orders -0 below +0 instead, and gives every NaN as the
dtype's default quiet NaN, so any reduction order gives the same bits.
"""
import functools

import numpy as np

from hvlite.ops import Max as _Max, Min as _Min

MIN, MAX = int(_Min), int(_Max)     # OP_MIN, OP_MAX in hvlite/_core/codes.h
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def default_nan(dtype):
    """The dtype's default quiet NaN: positive, top mantissa bit only."""
    dtype = np.dtype(dtype)
    bits = {2: 0x7E00 if dtype == np.float16 else 0x7FC0,   # float16, bfloat16
            4: 0x7FC00000, 8: 0x7FF8000000000000}[dtype.itemsize]
    return np.array([bits], UINT[dtype.itemsize]).view(dtype)[0]


def pair(a, b, op):
    """Min/Max of two same-dtype float arrays by the rule (NumPy's answer wherever it is unique)."""
    dtype = a.dtype
    x, y = a.astype(np.float64), b.astype(np.float64)     # exact for every float dtype here
    want = (np.minimum if op == MIN else np.maximum)(x, y)
    zero = (x == 0) & (y == 0)
    neg = (np.signbit(x) | np.signbit(y)) if op == MIN else (np.signbit(x) & np.signbit(y))
    want = np.where(zero, np.where(neg, -0.0, 0.0), want).astype(dtype)
    bits = want.view(UINT[dtype.itemsize])
    bits[np.isnan(x) | np.isnan(y)] = default_nan(dtype).view(UINT[dtype.itemsize])
    return want


def reduce(arrays, op):
    """The rule folded over several arrays (the order does not matter: that is the point)."""
    return functools.reduce(lambda acc, a: pair(acc, a, op), arrays)
