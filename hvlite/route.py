"""Which path a call takes, decided once, by where the buffer's memory is.

As c10d's ProcessGroup picks a backend by a tensor's device, hvlite picks a path by the array:
host memory (NumPy, CPU tensors' views, anything array-like) goes to the host path
(hvlite.submit), device memory (CuPy, torch CUDA tensors, `__cuda_array_interface__`, a CUDA
DLPack device) to the device path (hvlite.gpu.submit). Both paths have the same methods with
the same arguments, so a collective asks `path_of(x)` once and then descends; nothing below
asks again. Arguments a path cannot take fail on every rank (the device path sends them out
in its ticket), never on this rank alone.
"""
import numpy as np

from hvlite import runtime, submit as host
from hvlite.errors import InvalidArgumentError
from hvlite.gpu.arrays import is_device_array
from hvlite.process_sets import global_process_set

ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER = (
    host.ALLREDUCE, host.ALLGATHER, host.BROADCAST, host.ALLTOALL, host.REDUCESCATTER)


def _done(handle, sync):
    return handle.synchronize() if sync else handle


class HostPath:
    """NumPy and everything else array-like: hvlite.submit's checks, then the coordinator.
    `sync=True` runs the coordinator's rounds on the caller's thread."""

    kind = "host"

    def allreduce(self, x, op, name, algorithm, process_set, inplace=False, compression=None,
                  sync=False):
        if compression is not None:
            # out= only in place and process_set= only for another set: a user's compressor
            # may take neither
            kw = {} if process_set is None or process_set is global_process_set else \
                {"process_set": process_set}
            if inplace:
                kw["out"] = x
            return _done(compression.allreduce_async(x, op=op, name=name, **kw), sync)
        start = host.allreduce_async_ if inplace else host.allreduce_async
        return start(x, op, name, algorithm, process_set, sync=sync)

    def allgather(self, x, name, process_set, sync=False):
        return host.allgather_async(x, name, process_set, sync=sync)

    def broadcast(self, x, root_rank, name, process_set, inplace=False, sync=False):
        start = host.broadcast_async_ if inplace else host.broadcast_async
        return start(x, root_rank, name, process_set, sync=sync)

    def alltoall(self, x, splits, name, process_set, sync=False):
        return host.alltoall_async(x, splits, name, process_set, sync=sync)

    def reducescatter(self, x, op, name, process_set, sync=False):
        return host.reducescatter_async(x, op, name, process_set, sync=sync)

    def poison(self, kind, x, name, error, process_set):
        """Send this rank's part of a collective out failed and raise `error`: the other
        ranks' parts fail too instead of waiting for it."""
        from hvlite.process_sets import state_of

        def check(_name):
            raise error
        st = state_of(runtime.current(), process_set or global_process_set,
                      host._KIND[kind])
        host.submit(st, kind, name, None, check=check)
        raise error     # not reached: submit re-raises


class DevicePath:
    """Device memory: hvlite.gpu.submit's ticket, then its worker thread. The result is a
    device array in the caller's kind (torch for torch, else CuPy)."""

    kind = "device"

    def __init__(self):
        from hvlite.gpu import submit as device
        self.device = device

    def _run(self, kind, x, name, sync, **kw):
        return _done(self.device.submit(kind, x, name, **kw), sync)

    def allreduce(self, x, op, name, algorithm, process_set, inplace=False, compression=None,
                  sync=False):
        problem = None
        if compression is not None:
            problem = InvalidArgumentError(
                f"allreduce {name!r}: compression= takes host arrays; this one is on a GPU "
                "(hvlite.torch casts CUDA tensors itself: use its Compression.fp16)")
        elif algorithm not in (None, "auto"):
            problem = InvalidArgumentError(
                f"allreduce {name!r}: algorithm={algorithm!r} applies to host arrays; device "
                "arrays use the GPU path (docs/gpu.md)")
        return self._run(ALLREDUCE, x, name, sync, op=op, inplace=inplace,
                         process_set=process_set, problem=problem)

    def allgather(self, x, name, process_set, sync=False):
        return self._run(ALLGATHER, x, name, sync, process_set=process_set)

    def broadcast(self, x, root_rank, name, process_set, inplace=False, sync=False):
        return self._run(BROADCAST, x, name, sync, root_rank=root_rank, inplace=inplace,
                         process_set=process_set)

    def alltoall(self, x, splits, name, process_set, sync=False):
        return self._run(ALLTOALL, x, name, sync, splits=splits, process_set=process_set)

    def reducescatter(self, x, op, name, process_set, sync=False):
        return self._run(REDUCESCATTER, x, name, sync, op=op, process_set=process_set)

    def poison(self, kind, x, name, error, process_set):
        self.device.submit(kind, x, name, process_set=process_set, problem=error)
        raise error     # not reached: submit raises `error` once its ticket is out


HOST = HostPath()
_device = []


def path_of(x):
    """HOST, or the device path for device memory; NumPy input never imports anything for
    this (CuPy is loaded only once a device array arrives)."""
    if type(x) is np.ndarray or not is_device_array(x):
        return HOST
    if not _device:
        _device.append(DevicePath())
    return _device[0]
