"""Recognising device arrays without importing a GPU library.

The test for "is this on a GPU" must be cheap and import-free, because every collective asks it:
NumPy arrays return at the first check; other objects are asked for `__cuda_array_interface__`
or for a DLPack device of type CUDA. CuPy is imported only by `wrap`, i.e. only once a device
object has actually arrived.
"""
import sys

import numpy as np

from hvlite.errors import InvalidArgumentError

# DLPack device types (dlpack.h): kDLCUDA and kDLCUDAManaged are device memory; kDLCUDAHost
# (pinned host memory) is readable by the CPU and goes the NumPy way.
DLPACK_CUDA = 2
DLPACK_CUDA_MANAGED = 13
_DEVICE_TYPES = (DLPACK_CUDA, DLPACK_CUDA_MANAGED)

# Other device-array families, checked first: (predicate, backend factory) pairs. Empty in a
# user's job; tests put a host-backed stand-in here to run the device path on a CPU.
FAMILIES = []


def _interface(x):
    try:
        return getattr(x, "__cuda_array_interface__", None)
    except Exception:            # torch raises for a CPU tensor; that is "not a device array"
        return None


def dlpack_device(x):
    """(device_type, device_id) from `__dlpack_device__`, or None."""
    f = getattr(x, "__dlpack_device__", None)
    if f is None:
        return None
    try:
        dev = f()
        return int(dev[0]), int(dev[1])
    except Exception:
        return None


def is_device_array(x):
    """True for an object whose memory is on a GPU."""
    if isinstance(x, (np.ndarray, np.generic, list, tuple, int, float)):
        return False
    if FAMILIES and any(pred(x) for pred, _ in FAMILIES):
        return True
    if _interface(x) is not None:
        return True
    dev = dlpack_device(x)
    return dev is not None and dev[0] in _DEVICE_TYPES


def device_id(x):
    """The CUDA device number `x` lives on, when its DLPack device says so; else None."""
    dev = dlpack_device(x)
    return dev[1] if dev is not None and dev[0] in _DEVICE_TYPES else None


def _torch_cuda(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor) and x.is_cuda


def describe(x):
    """Pointer, shape, dtype, strides and stream of a device object, without CuPy, from its
    `__cuda_array_interface__` (version 2 and 3). Raises for an object that has none."""
    cai = _interface(x)
    if cai is None:
        raise InvalidArgumentError(f"{type(x).__name__} has no __cuda_array_interface__")
    ptr, readonly = cai["data"]
    shape = tuple(int(d) for d in cai["shape"])
    dtype = np.dtype(cai["typestr"]) if not cai.get("descr") or len(cai["descr"]) == 1 \
        else np.dtype(cai["descr"])
    strides = cai.get("strides")
    contiguous = strides is None or tuple(strides) == _c_strides(shape, dtype.itemsize)
    return {"ptr": int(ptr), "readonly": bool(readonly), "shape": shape, "dtype": dtype,
            "contiguous": contiguous, "stream": cai.get("stream"),
            "nbytes": int(np.prod(shape, dtype=np.int64)) * dtype.itemsize}


def _c_strides(shape, itemsize):
    out, step = [], itemsize
    for d in reversed(shape):
        out.append(step)
        step *= d
    return tuple(reversed(out))


def load_cupy(x=None):
    """CuPy, or a clear error naming what was passed and how to get it."""
    try:
        import cupy
    except ImportError as e:
        what = f"a {type(x).__module__}.{type(x).__name__} on a GPU" if x is not None else \
            "a device array"
        raise InvalidArgumentError(
            f"hvlite got {what}, and device arrays need CuPy, which is not importable here "
            f"({e}); install hvlite's [cuda] extra (a CuPy build for your CUDA version), or "
            "pass a NumPy array") from None
    return cupy


def wrap(x):
    """(cupy array sharing x's memory, restore): `restore(result)` gives the result back in
    x's own kind (a torch tensor for a torch tensor, else a CuPy array), on x's device."""
    cupy = load_cupy(x)
    if isinstance(x, cupy.ndarray):
        return x, lambda r: r
    if _torch_cuda(x):
        import torch
        return cupy.from_dlpack(x.detach()), lambda r: torch.from_dlpack(r)
    if _interface(x) is not None:
        return cupy.asarray(x), lambda r: r
    return cupy.from_dlpack(x), lambda r: r
