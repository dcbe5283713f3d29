"""Recognising device arrays without CuPy, the clear error without it, and that NumPy
collectives import nothing GPU-related."""
import subprocess
import sys

import numpy as np
import pytest

from hvlite.gpu import arrays, cuda_aware


class CAI:
    def __init__(self, shape=(4, 3), typestr="<f4", strides=None, stream=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (1234, False),
                                         "version": 3, "strides": strides, "stream": stream}


class DL:
    def __init__(self, kind):
        self.kind = kind

    def __dlpack_device__(self):
        return (self.kind, 0)


def test_recognition():
    assert arrays.is_device_array(CAI())
    assert arrays.is_device_array(DL(arrays.DLPACK_CUDA))
    assert arrays.is_device_array(DL(arrays.DLPACK_CUDA_MANAGED))
    for host in (np.zeros(3), DL(1), DL(3), [1, 2], 3.0, object()):   # CPU, pinned host
        assert not arrays.is_device_array(host)


def test_torch_cpu_tensor_is_not_a_device_array():
    torch = pytest.importorskip("torch")
    assert not arrays.is_device_array(torch.zeros(3))


def test_describe():
    d = arrays.describe(CAI(stream=7))
    assert (d["ptr"], d["shape"], d["dtype"], d["nbytes"], d["contiguous"], d["stream"]) == \
        (1234, (4, 3), np.float32, 48, True, 7)
    assert not arrays.describe(CAI(strides=(4, 16)))["contiguous"]
    assert arrays.describe(CAI(strides=(12, 4)))["contiguous"]


def test_no_cupy_is_a_clear_error():
    if "cupy" in sys.modules or _has_cupy():
        pytest.skip("CuPy is installed here")
    from hvlite import InvalidArgumentError
    with pytest.raises(InvalidArgumentError, match=r"need CuPy.*\[cuda\] extra"):
        arrays.wrap(CAI())


def _has_cupy():
    import importlib.util
    return importlib.util.find_spec("cupy") is not None


def test_cuda_aware_override():
    never = lambda: (_ for _ in ()).throw(AssertionError("queried despite the override"))
    assert cuda_aware.decide("1", never) == (True, "HVLITE_CUDA_AWARE=1")
    assert cuda_aware.decide("0", never) == (False, "HVLITE_CUDA_AWARE=0")
    assert cuda_aware.decide("auto", lambda: (True, "asked")) == (True, "asked")


def test_library_query_answers():
    from mpi4py import MPI  # noqa: F401  (loads libmpi)
    yes, why = cuda_aware.query_library()
    assert isinstance(yes, bool) and "MPIX_Query_cuda_support" in why


def test_numpy_collectives_import_nothing_for_gpus():
    code = ("import sys, numpy as np, hvlite as hvd; hvd.init(); hvd.allreduce(np.ones(3)); "
            "hvd.broadcast(np.ones(2), 0); hvd.allgather(np.ones(2)); "
            "bad = [m for m in ('cupy', 'hvlite.gpu.submit', 'hvlite.gpu.copy_engine') if m in sys.modules];"
            "print('loaded', bad); hvd.shutdown(); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=_env())
    assert r.returncode == 0, r.stdout + r.stderr


def _env():
    import os
    return dict(os.environ, HVLITE_PROBE="0")
