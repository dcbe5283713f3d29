"""A host-memory stand-in for a device array family, so the whole device path (tickets, worker,
staging, CUDA-aware ring, results, stream ordering) runs under MPI on a CPU-only machine."""
import contextlib
import threading

import numpy as np

from fake_engine import FakeEngine
from hvlite.gpu import submit as api


class FakeDeviceArray:
    """Announces itself as CUDA memory through DLPack; its memory is a NumPy array."""

    def __init__(self, a, device=0):
        self.a, self.device = a, device

    def __dlpack_device__(self):
        return (2, self.device)


class _Locked:
    """The fake engine, used by the caller's thread and the worker's."""

    def __init__(self, engine):
        self._e, self._lock = engine, threading.RLock()

    def __getattr__(self, name):
        f = getattr(self._e, name)
        if not callable(f):
            return f

        def locked(*a, **k):
            with self._lock:
                return f(*a, **k)
        return locked


class HostBackend:
    device_id = 0                   # the GPU this rank's device collectives run on

    def __init__(self, seed):
        self.fake = FakeEngine(np.random.default_rng(seed))
        self.engine = _Locked(self.fake)
        self.xp = np

    def wrap(self, x):
        return x.a, FakeDeviceArray

    def caller_stream(self, x):
        return self.fake.caller

    def use(self, stream):
        return contextlib.nullcontext()

    def fence(self, stream):
        pass

    def produce(self, fn):
        """Queue the caller's kernel that writes an input (runs late, like a GPU kernel)."""
        self.engine.kernel(self.fake.caller, fn)

    def settle(self):
        """Wait for the caller's stream (what a later kernel would see)."""
        self.engine.sync(self.engine.record(self.fake.caller))


def install(seed):
    be = HostBackend(seed)
    api.BACKENDS[:] = [(lambda x: isinstance(x, FakeDeviceArray), lambda: be)]
    return be
