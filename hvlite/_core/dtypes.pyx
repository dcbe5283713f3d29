"""The dtype table: NumPy dtype <-> core code, element size."""
import numpy as np

cdef size_t _SIZES[12]
_SIZES[:] = [2, 2, 4, 8, 1, 1, 2, 2, 4, 4, 8, 8]

NAMES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "uint16",
         "int32", "uint32", "int64", "uint64")

cdef size_t dtype_size(int dt) noexcept nogil:
    return _SIZES[dt]


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


_BY_DTYPE = {}
for _code, _name in enumerate(NAMES):
    if _name != "bfloat16":
        _BY_DTYPE[np.dtype(_name)] = _code
_bf = _bfloat16()
if _bf is not None:
    _BY_DTYPE[_bf] = DT_BFLOAT16


def supported_names():
    return [n for n in NAMES if n != "bfloat16" or _bf is not None]


def code_of(dtype):
    """Core code of a NumPy dtype, or -1 when the core cannot reduce it."""
    return _BY_DTYPE.get(dtype, -1)


def size_of(int code):
    return dtype_size(code)
