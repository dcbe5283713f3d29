"""hvlite.route: one decision per call, by where the memory is; the device path's stream and
device choices, on stand-ins (no GPU, no CuPy)."""
import subprocess
import sys
import types

import numpy as np
import pytest

from hvlite import route
from hvlite.errors import InvalidArgumentError
from hvlite.gpu import arrays


class CAI:
    """Exposes __cuda_array_interface__ as CuPy and Numba arrays do (v3: with a stream)."""

    def __init__(self, stream=None):
        self.__cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (4096, False),
                                         "version": 3, "strides": None, "stream": stream}


class DL:
    def __init__(self, kind, device=0):
        self.kind, self.device = kind, device

    def __dlpack_device__(self):
        return (self.kind, self.device)


@pytest.mark.parametrize("x", [np.zeros(3), np.float32(1), [1.0, 2.0], 3, DL(1), DL(3)],
                         ids=["ndarray", "scalar", "list", "int", "dlpack-cpu", "dlpack-pinned"])
def test_host_memory_takes_the_host_path(x):
    assert route.path_of(x) is route.HOST


@pytest.mark.parametrize("x", [CAI(), CAI(stream=7), DL(arrays.DLPACK_CUDA),
                               DL(arrays.DLPACK_CUDA_MANAGED, 1)],
                         ids=["cai", "cai-stream", "dlpack-cuda", "dlpack-managed"])
def test_device_memory_takes_the_device_path(x):
    p = route.path_of(x)
    assert p is not route.HOST and p.kind == "device"
    assert route.path_of(x) is p                   # one device path, made once


def test_torch_cpu_tensor_takes_the_host_path():
    torch = pytest.importorskip("torch")
    assert route.path_of(torch.zeros(3)) is route.HOST


def test_a_registered_family_takes_the_device_path(monkeypatch):
    """The seam tests use to run the device path on host memory."""
    class Odd:
        pass
    monkeypatch.setattr(arrays, "FAMILIES", [(lambda x: isinstance(x, Odd), None)])
    assert route.path_of(Odd()).kind == "device"
    assert route.path_of(np.zeros(2)) is route.HOST


def test_routing_imports_no_gpu_library():
    """Deciding, and making the device path, import neither CuPy nor torch."""
    code = ("import sys, numpy as np\n"
            "from hvlite import route\n"
            "class C:\n"
            "    __cuda_array_interface__ = {'shape': (1,), 'typestr': '<f4', 'data': (8, 0), "
            "'version': 3}\n"
            "assert route.path_of(np.zeros(1)) is route.HOST\n"
            "assert route.path_of(C()).kind == 'device'\n"
            "print(sorted(m for m in ('cupy', 'torch') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _backend(current="current"):
    """A CupyBackend over a stand-in for CuPy's stream calls (a CuPy before 14: ExternalStream,
    no Stream.from_external; tests/gpu/test_copy_engine.py has 14's)."""
    from hvlite.gpu import submit
    be = object.__new__(submit.CupyBackend)
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(ExternalStream=lambda h: ("ext", h)))
    be.engine = types.SimpleNamespace(cp=cp, current_stream=lambda: current,
                                      device=types.SimpleNamespace(id=0))
    be.xp = cp
    return be


def test_the_caller_stream_is_the_one_the_interface_names():
    be = _backend()
    assert be.caller_stream(CAI(stream=7)) == ("ext", 7)
    assert be.caller_stream(CAI(stream=2)) == ("ext", 2)       # per-thread default stream
    assert be.caller_stream(CAI()) == "current"                # none named: the current one
    assert be.caller_stream(DL(arrays.DLPACK_CUDA)) == "current"


def test_an_array_on_another_gpu_is_refused_naming_both():
    from hvlite.gpu import submit
    be = _backend()
    submit._device_check(be, DL(arrays.DLPACK_CUDA, 0), "allreduce", "w")      # same GPU
    submit._device_check(be, CAI(), "allreduce", "w")          # device unknown: not refused
    with pytest.raises(InvalidArgumentError, match=r"allreduce 'w'.*GPU 1.*GPU 0"):
        submit._device_check(be, DL(arrays.DLPACK_CUDA, 1), "allreduce", "w")


def test_device_path_refusals_go_out_in_the_ticket(monkeypatch):
    """algorithm= and compression= on device memory become the ticket's problem (every rank
    then fails), never a raise before the ticket."""
    p = route.path_of(CAI())
    seen = []
    monkeypatch.setattr(p.device, "submit", lambda *a, **k: seen.append(k["problem"]) or "h")
    p.allreduce(CAI(), 0, "n", "ring", None)
    p.allreduce(CAI(), 0, "n", None, None, compression=object())
    p.allreduce(CAI(), 0, "n", "auto", None)
    assert "algorithm='ring'" in str(seen[0]) and "compression=" in str(seen[1])
    assert seen[2] is None
