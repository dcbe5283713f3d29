"""A stand-in for CUDA tensors on a CPU: torch CPU tensors served by a host-backed device family
(tests/gpu/host_backend.py), so hvlite.torch's CUDA route runs without a GPU."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
import torch  # noqa: E402

from hvlite.gpu import arrays  # noqa: E402
from hvlite.torch import _bridge  # noqa: E402
from host_backend import HostBackend  # noqa: E402


class TorchStandIn(HostBackend):
    """Torch CPU tensors as the device family: the device path sees their memory as NumPy
    and gives results back as tensors (as the CuPy backend does for CUDA tensors). The
    caller's stream is settled when a result is waited for or handed back, as torch's CPU ops
    run at once."""

    def __init__(self, seed):
        super().__init__(seed)
        self.wrapped = 0
        wait = self.engine.wait

        def caller_waits(stream, event):
            if stream == self.fake.caller:
                self.engine.sync(event)
            else:
                wait(stream, event)
        self.engine.wait = caller_waits

    def wrap(self, x):
        self.wrapped += 1
        return x.numpy(), self.restore

    def restore(self, a):
        """A result as a tensor once the caller's stream has run: a staged result's copy to
        the device is queued there (on a GPU, torch's later work on that stream follows it;
        here torch reads the memory at once)."""
        self.settle()
        return torch.from_numpy(a)


def start(hvd):
    """One thread for torch, hvlite started: (rank, size, the stand-in for this rank)."""
    torch.set_num_threads(1)
    hvd.init()
    r = hvd.rank()
    return r, hvd.size(), TorchStandIn(seed=r)


def route(be, mode):
    """Which tensors take the device route to stand-in `be`: "all"; "marked", only those
    marked `t.gpu = True` (a group can mix both); None, none but real CUDA tensors."""
    pred = {"all": lambda t: isinstance(t, torch.Tensor),
            "marked": lambda t: isinstance(t, torch.Tensor) and getattr(t, "gpu", False),
            None: lambda t: t.device.type == "cuda"}[mode]
    arrays.FAMILIES[:] = [(pred, lambda: be)] if mode else []
    _bridge.on_device = pred
