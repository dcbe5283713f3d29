"""The device submission path: hvlite.collectives sends device arrays here.

Submit (caller's thread): wrap the array without copying, check its dtype, record an event on
the caller's current stream, send the ticket, queue the job. The worker thread then moves the
data: with a CUDA-aware MPI, all-reduce and broadcast hand device memory to MPI (the ring
reduces on the GPU); otherwise, and for the other collectives, through pinned host buffers
(staging.py). The result is a new array on the same device (or the caller's array, for the
in-place forms), in the caller's kind: CuPy for CuPy and raw interfaces, torch for torch.
"""
import functools

import numpy as np

from hvlite import runtime, submit as _host
from hvlite.errors import DtypeError, InvalidArgumentError, UnsupportedOperationError
from hvlite.gpu import arrays, cuda_aware, ring, staging
from hvlite.gpu.worker import (DeviceHandle, check_tickets, direct_comm, ticket_record,
                               ticket_table, worker_of)
from hvlite.ops import ReduceOp, as_op
from hvlite.process_sets import global_process_set, state_of
from hvlite._core.codes import COLLECTIVES

ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER = range(5)      # the core's codes
_WHAT = dict(enumerate(COLLECTIVES[:5]))
BACKENDS = arrays.FAMILIES      # other array families (tests put a host-backed one here)


class CupyBackend:
    def __init__(self):
        from hvlite.gpu.copy_engine import CupyEngine
        self.xp = arrays.load_cupy()
        self.engine = CupyEngine()
        self.wrap = arrays.wrap

    @property
    def device_id(self):
        return self.engine.device.id

    def caller_stream(self, x):
        """The stream the caller's work on `x` is queued on: torch's current stream for a
        torch tensor (its __cuda_array_interface__ names none), else the one the interface
        names, else CuPy's current stream."""
        from hvlite.gpu.copy_engine import external_stream, stream_of
        if arrays._torch_cuda(x):
            import torch
            return external_stream(self.xp, torch.cuda.current_stream(x.device).cuda_stream)
        cai = arrays._interface(x)
        return stream_of(cai.get("stream") if cai else None, self.engine)

    def use(self, stream):
        return stream                    # a CuPy stream is a context manager: "make current"

    def fence(self, stream):
        stream.synchronize()             # this stream only, never the device


@functools.lru_cache(maxsize=None)
def _cupy_backend():
    return CupyBackend()


def backend_for(x):
    for pred, make in BACKENDS:
        if pred(x):
            return make()
    return _cupy_backend()


def _flat(xp, a):
    return a.reshape(-1).view(xp.uint8)


@functools.lru_cache(maxsize=None)
def _decision(setting):
    return cuda_aware.decide(setting)


def is_cuda_aware(rt=None):
    """(answer, why) for this job: HVLITE_CUDA_AWARE, else the MPI library's own answer."""
    rt = rt or runtime.current()
    return _decision(rt.settings.cuda_aware)


def _direct_comm(rt, st):
    """The communicator device memory goes to MPI on (global set only; other sets stage)."""
    if st.id != 0 or not is_cuda_aware(rt)[0]:
        return None
    return direct_comm(rt)


def _device_check(be, x, what, name):
    """One GPU per rank, as in Horovod: an array on another GPU than the one this rank's device
    collectives run on is refused (its memory is not the engine's to stream from)."""
    want, have = getattr(be, "device_id", None), arrays.device_id(x)
    if want is not None and have is not None and have != want:
        raise InvalidArgumentError(
            f"{what} {name!r}: the array is on GPU {have}, and this rank's device collectives "
            f"run on GPU {want}; use one GPU per rank (torch.cuda.set_device(local_rank) or "
            "cupy.cuda.Device(local_rank).use() before the first collective)")


def _checked(be, x, kind, what, name, op, root_rank, st, inplace):
    """(array, restore, dtype code, op code, root position) of a device argument, or raises
    the error every rank then reports."""
    arr, restore = be.wrap(x)
    _device_check(be, x, what, name)
    code = _host.code_of(np.dtype(arr.dtype))
    if code < 0:
        raise DtypeError(f"{what} {name!r}: unsupported dtype {arr.dtype} on the device; "
                         f"hvlite handles {', '.join(_host.supported_names())}")
    o = root = 0
    if kind in (ALLREDUCE, REDUCESCATTER):
        o = int(as_op(op))
        if o == ReduceOp.Adasum and kind == REDUCESCATTER:      # as the host path, and Horovod
            raise UnsupportedOperationError(
                f"{what} {name!r}: op=Adasum applies to allreduce and grouped_allreduce only "
                "(its dot products need whole tensors)")
        if o == ReduceOp.Adasum:
            raise InvalidArgumentError(f"{what} {name!r}: op=Adasum takes host arrays "
                                       "(NumPy, CPU tensors); copy device arrays to the host")
    if kind == BROADCAST:
        ok = isinstance(root_rank, (int, np.integer)) and not isinstance(root_rank, bool)
        root = st.position(int(root_rank)) if ok else -1
        if root < 0:
            raise InvalidArgumentError(f"{what} {name!r}: root_rank {root_rank!r} is not a "
                                       f"rank of this process set ({st.ranks})")
    if inplace and not arr.flags.c_contiguous:
        raise InvalidArgumentError(f"{what} {name!r}: in place needs a C-contiguous array")
    return arr, restore, code, o, root


def submit(kind, x, name=None, op=0, root_rank=0, splits=None, inplace=False,
           process_set=None, problem=None):
    """Queue a device collective and return its DeviceHandle. `problem`: an error the caller
    found in the arguments; it goes out in the ticket, so every rank fails, then raises here."""
    rt = runtime.current()
    ps = global_process_set if process_set is None else process_set
    what = _WHAT[kind] + ("_" if inplace else "")
    st = state_of(rt, ps, what)
    bad_name = name is not None and name != "" and not isinstance(name, str)
    name = st.auto_name(_WHAT[kind]) if name is None or name == "" else str(name)   # as the host path
    be = arr = None
    code = o = root = 0
    aware = kind in (ALLREDUCE, BROADCAST) and st.id == 0 and is_cuda_aware(rt)[0]
    if problem is None:
        try:
            if bad_name:
                raise InvalidArgumentError(f"{what} {name!r}: the name must be a string")
            be = backend_for(x)
            arr, restore, code, o, root = _checked(be, x, kind, what, name, op, root_rank, st,
                                                   inplace)
            # what can still fail here (a copy, an allocation) fails before the ticket, so it
            # goes out in it and every rank fails; nothing after the ticket may fail alone
            xp, eng = be.xp, be.engine
            caller = be.caller_stream(x)
            # on the caller's stream, so that CuPy's pool hands out a result's memory in that
            # stream's order (a block the caller freed may still be read by its queued work)
            with be.use(caller):
                src = arr if arr.flags.c_contiguous else xp.ascontiguousarray(arr)
                out = src if inplace or kind not in (ALLREDUCE, BROADCAST) else xp.empty_like(src)
            after = eng.record(caller)
        except (DtypeError, InvalidArgumentError, UnsupportedOperationError) as e:
            problem = e
        except Exception as e:          # noqa: BLE001 - e.g. a dtype the array library lacks
            problem = DtypeError(f"{what} {name!r}: this {type(x).__name__} cannot be used on "
                                 f"the device: {type(e).__name__}: {e}")

    def finish(result):
        value, done = result
        stream = be.caller_stream(x)
        if done is not None:
            eng.wait(stream, done)              # the caller's stream now sees the result
        if inplace:
            return x
        value, extra = value if isinstance(value, tuple) else (value, None)
        if isinstance(value, _Staged):          # a host result: to the device on this stream
            value = value.to_device(be, stream, w)
        return restore(value) if extra is None else (restore(value), extra)

    w = worker_of(st)
    size = 0 if arr is None or kind in (ALLGATHER, ALLTOALL) else arr.nbytes  # those may differ
    with w.queue_lock:      # order numbers, tickets and the queue in one order, whatever thread
        record = ticket_record(name, kind, code, o, root, size, problem is not None,
                               w.next_order())
        if kind == ALLREDUCE:       # runs with joined ranks, as host all-reduces do
            ticket = _host.allreduce_async(ticket_table(record, st.position(rt.rank),
                                                        len(st.ranks)),
                                           ReduceOp.Max, name=name, process_set=ps)
        else:
            ticket = _host.allgather_async(record, name=name, process_set=ps)
        # a collective Dup on the first call: a rank that rejected its call makes it too, so
        # no peer waits in it for this rank
        direct = _direct_comm(rt, st) if aware else None
        if problem is not None:
            w.submit(DeviceHandle(name, None), lambda: w.ticket_table(ticket))   # drain it
            raise problem
        job = _Job(be, st, ps, kind, name, src, out, o, root_rank, root, splits, after, ticket,
                   direct, rt.settings.cuda_chunk_bytes, w)
        handle = DeviceHandle(name, finish)
        w.submit(handle, job)
    return handle


class _Staged:
    """A result still in pinned host memory. synchronize() moves it to the device on the
    caller's thread and stream: its memory comes from the pool in that stream's order (CuPy's
    pool reuses a block freed on a stream for that stream's next allocation), and the copy
    follows the caller's own work. The pinned buffer is held until the copy has read it."""

    __slots__ = ("back", "shape", "dtype", "nbytes")

    def __init__(self, back, shape, dtype, nbytes):
        self.back, self.shape, self.dtype, self.nbytes = back, shape, dtype, nbytes

    def to_device(self, be, stream, worker):
        with be.use(stream):
            out = be.xp.empty(self.shape, dtype=self.dtype)
        done = staging.stage_out(be.engine, _flat(be.xp, out), self.back, self.nbytes, stream)
        worker.hold(be.engine, done, self.back)
        return out


class _Job:
    def __init__(self, be, st, ps, kind, name, src, out, op, root_rank, root, splits, after,
                 ticket, direct, chunk_bytes, worker):
        self.__dict__.update(locals())
        del self.__dict__["self"]

    def __call__(self):
        everyone = check_tickets(self.worker.ticket_table(self.ticket), self.name,
                                 self.st.ranks, _WHAT[self.kind])
        be, eng, xp = self.be, self.be.engine, self.be.xp
        # the current device is per thread (0 in a new one): this rank's GPU for everything
        # the worker thread does, its streams, events and allocations, and their release
        device = getattr(eng, "device", None)
        if device is not None:
            device.use()
        self.worker.reap()
        stream = getattr(self.worker, "stream", None)
        if stream is None:
            stream = self.worker.stream = (eng.new_stream(), eng.new_stream())
        with be.use(stream[1]):
            # a rank that has joined takes part in host collectives only (as the op's
            # identity): with one, MPI's own ring over device memory would wait for it
            if self.direct is not None and everyone:
                return self._direct(stream[1])
            if self.kind in (ALLREDUCE, BROADCAST):
                return self._chunked(stream)
            return self._whole(stream[1])

    def _direct(self, stream):
        eng, xp = self.be.engine, self.be.xp
        eng.sync(self.after)                     # MPI reads the buffer from the host thread
        if self.out is not self.src:             # out of place: reduce a copy, on this stream
            xp.copyto(self.out, self.src)
            self.be.fence(stream)
        flat = self.out.reshape(-1)
        if self.kind == ALLREDUCE:
            ring.allreduce(self.direct, flat, self.op, xp, fence=lambda: self.be.fence(stream))
        else:
            from mpi4py import MPI
            self.direct.Bcast([flat.view(xp.uint8), MPI.BYTE], root=self.root)
        return self.out, eng.record(stream)

    def _chunked(self, streams):
        eng = self.be.engine
        nbytes, chunk = self.src.nbytes, self.chunk_bytes
        slots, freed = self.worker.staging_slots(eng, chunk)
        dtype = np.dtype(self.src.dtype)

        def start(i, slot, size):
            view = slot[:size].view(dtype)
            if self.kind == ALLREDUCE:
                return _host.allreduce_async_(view, op=ReduceOp(self.op),
                                              name=f"{self.name}.c{i}", process_set=self.ps)
            return _host.broadcast_async_(view, self.root_rank, name=f"{self.name}.c{i}",
                                          process_set=self.ps)
        done = staging.run_chunked(eng, _flat(self.be.xp, self.src), _flat(self.be.xp, self.out),
                                   nbytes, chunk, dtype.itemsize, start, self.after, streams,
                                   slots, freed)
        return self.out, done

    def _whole(self, stream):
        eng, xp = self.be.engine, self.be.xp
        host = eng.pinned(self.src.nbytes)
        staging.stage_in(eng, _flat(xp, self.src), self.src.nbytes, host, self.chunk_bytes,
                         self.after, stream)
        dtype = np.dtype(self.src.dtype)
        h = host[:self.src.nbytes].view(dtype).reshape(self.src.shape)
        extra = None
        if self.kind == ALLGATHER:
            res = _host.allgather_async(h, name=f"{self.name}.data",
                                        process_set=self.ps).synchronize()
        elif self.kind == REDUCESCATTER:
            res = _host.reducescatter_async(h, op=ReduceOp(self.op), name=f"{self.name}.data",
                                            process_set=self.ps).synchronize()
        else:
            res = _host.alltoall_async(h, splits=self.splits, name=f"{self.name}.data",
                                       process_set=self.ps).synchronize()
            if self.splits is not None:
                res, extra = res
        res = np.ascontiguousarray(res)
        back = eng.pinned(res.nbytes)
        back[:res.nbytes] = res.reshape(-1).view(np.uint8)
        # the device copy is made at synchronize(), on the caller's thread and stream
        staged = _Staged(back, res.shape, res.dtype, res.nbytes)
        return ((staged, extra) if extra is not None else staged), None
