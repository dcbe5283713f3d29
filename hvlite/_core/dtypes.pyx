"""The dtype table: NumPy dtype <-> core code, element size."""
import numpy as np

from hvlite._core.codes import DTYPES as NAMES      # the table in codes.h


cdef size_t dtype_size(int dt) noexcept nogil:
    return HV_DTYPE_SIZES[dt]


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


# Arrays' dtypes; "float32 as float16" and "float32 as bfloat16" are float32 buffers reduced in
# 16-bit precision (compression on one node), never an array's own dtype.
ARRAY_NAMES = tuple(n for n in NAMES if " as " not in n)
_BY_DTYPE = {}
for _code, _name in enumerate(NAMES):
    if _name != "bfloat16" and _name in ARRAY_NAMES:
        _BY_DTYPE[np.dtype(_name)] = _code
_bf = _bfloat16()
if _bf is not None:
    _BY_DTYPE[_bf] = DT_BFLOAT16


def supported_names():
    return [n for n in ARRAY_NAMES if n != "bfloat16" or _bf is not None]


def code_of(dtype):
    """Core code of a NumPy dtype, or -1 when the core cannot reduce it."""
    return _BY_DTYPE.get(dtype, -1)


def size_of(int code):
    return dtype_size(code)
