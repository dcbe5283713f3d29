"""The public collectives: the front door every user call goes through.

Each collective asks hvlite.route once which path its array takes (device memory: the device
path, hvlite.gpu.submit; everything else: the host path, hvlite.submit, which checks the
arguments and queues a request on the process set's coordinator) and descends. The async
forms return a handle (hvlite.work.Work); the synchronous forms synchronize it, and on the host
path their own thread runs the coordinator's rounds (no hand-off to its thread and back).
"""
import pickle

import numpy as np

from hvlite import runtime, submit as host
from hvlite.errors import InvalidArgumentError, ShutdownError
from hvlite.gpu import worker as gpu_worker
from hvlite.ops import Average, ReduceOp
from hvlite.process_sets import global_process_set, state_of
from hvlite.route import path_of
from hvlite.submit import (ALLGATHER, ALLREDUCE, ALLTOALL, BARRIER, BROADCAST,  # noqa: F401
                           JOIN, REDUCESCATTER, Handle)
from hvlite.work import ChainHandle, GroupHandle, Mapped, Work   # noqa: F401  (handles of the front door)


def _handle(handle, what):
    if not isinstance(handle, Work):
        raise InvalidArgumentError(f"{what}() needs a handle returned by an *_async call, got "
                                   f"{type(handle).__name__}")
    return handle


def poll(handle):
    """True when the collective behind `handle` has finished."""
    return _handle(handle, "poll").poll()


def synchronize(handle):
    """Wait for `handle` and return its result."""
    return _handle(handle, "synchronize").synchronize()


# ---- allreduce ------------------------------------------------------------------------------
# Each call tries the lean face first (runtime.lean, _core/lean.pyx: a plain NumPy array on the
# global set, checked and submitted in one C call; it returns None for anything else, without a
# conversion), then asks route.path_of once and descends.

def allreduce_async(x, op=Average, name=None, algorithm=None, process_set=global_process_set,
                    compression=None):
    """Start reducing `x` across the set's ranks (all by default) into a new array; returns a
    Handle. With `compression` (an hvlite.compression.Compression entry) the compressor runs the
    exchange."""
    lean = runtime.lean
    if lean is not None and compression is None:
        started = lean.allreduce_async(x, op, name, algorithm, process_set, False)
        if started is not None:
            return started
    return path_of(x).allreduce(x, op, name, algorithm, process_set, False, compression)


def allreduce_async_(x, op=Average, name=None, algorithm=None, process_set=global_process_set,
                     compression=None):
    """Start reducing the NumPy (or device) array `x` in place; returns a Handle. With
    `compression` the result is decompressed straight into x."""
    lean = runtime.lean
    if lean is not None and compression is None:
        started = lean.allreduce_async(x, op, name, algorithm, process_set, True)
        if started is not None:
            return started
    return path_of(x).allreduce(x, op, name, algorithm, process_set, True, compression)


def allreduce(x, op=Average, name=None, algorithm=None, process_set=global_process_set,
              compression=None):
    """Return a new array holding the reduction of `x` (anything array-like) across all ranks.

    op: hvlite.Sum, Average (default, as in Horovod), Min, Max or Product.
    algorithm: "ring", "rhd", "rd", "tree", "hierarchical", "shm", "mpi" or "auto" (default from
    HVLITE_ALLREDUCE_ALGORITHM). process_set: a hvlite.ProcessSet this rank belongs to.
    compression: e.g. hvlite.compression.Compression.fp16 (see hvlite.compression).
    """
    lean = runtime.lean
    if lean is not None and compression is None:
        done = lean.allreduce(x, op, name, algorithm, process_set, False)
        if done is not None:
            return done
    return path_of(x).allreduce(x, op, name, algorithm, process_set, False, compression,
                                sync=True)


def allreduce_(x, op=Average, name=None, algorithm=None, process_set=global_process_set,
               compression=None):
    """Reduce the NumPy array `x` in place across the set's ranks and return it."""
    lean = runtime.lean
    if lean is not None and compression is None:
        done = lean.allreduce(x, op, name, algorithm, process_set, True)
        if done is not None:
            return done
    return path_of(x).allreduce(x, op, name, algorithm, process_set, True, compression,
                                sync=True)


def grouped_allreduce_async(tensors, op=Average, name=None, algorithm=None,
                            process_set=global_process_set):
    """Start reducing a list of arrays as one group (negotiated and fused together)."""
    st = state_of(runtime.current(), process_set, "grouped_allreduce")
    base = st.auto_name("grouped_allreduce") if name is None or name == "" else str(name)
    if isinstance(tensors, np.ndarray) or not isinstance(tensors, (list, tuple)):
        # The others' first part fails too (a part count is not known here: parts after the
        # first are left to the stall check, which names them).
        error = InvalidArgumentError(f"grouped_allreduce {base!r}: needs a list of arrays, got "
                                     f"{type(tensors).__name__}")

        def reject(_name):
            raise error
        host.submit(st, host.ALLREDUCE, f"{base}.0", None, check=reject)
    handles, first = [], None
    for i, t in enumerate(tensors):     # every part goes out (poisoned if rejected): no rank
        try:                            # is left waiting for the parts after a bad one
            handles.append(allreduce_async(t, op, f"{base}.{i}", algorithm, process_set))
        except Exception as e:          # noqa: BLE001 - raised once every part is out
            first = first or e
    if first is not None:
        raise first
    return GroupHandle(handles)


def grouped_allreduce(tensors, op=Average, name=None, algorithm=None,
                      process_set=global_process_set):
    return grouped_allreduce_async(tensors, op, name, algorithm, process_set).synchronize()



# ---- allgather, broadcast, alltoall, reducescatter ------------------------------------------

def allgather_async(x, name=None, process_set=global_process_set):
    """Start concatenating every rank's `x` along the first dimension (which may differ by
    rank), in rank order (within a process set: in the order of its ranks)."""
    return path_of(x).allgather(x, name, process_set)


def allgather(x, name=None, process_set=global_process_set):
    lean = runtime.lean
    if lean is not None:
        done = lean.allgather(x, name, process_set)
        if done is not None:
            return done
    return path_of(x).allgather(x, name, process_set, sync=True)


def broadcast_async(x, root_rank, name=None, process_set=global_process_set):
    """Start copying root_rank's `x` to every rank of the set, into a new array. root_rank is
    a global rank (as in Horovod), and must belong to the set."""
    return path_of(x).broadcast(x, root_rank, name, process_set)


def broadcast_async_(x, root_rank, name=None, process_set=global_process_set):
    """Start overwriting the NumPy array `x` with root_rank's, in place."""
    return path_of(x).broadcast(x, root_rank, name, process_set, inplace=True)


def broadcast(x, root_rank, name=None, process_set=global_process_set):
    lean = runtime.lean
    if lean is not None:
        done = lean.broadcast(x, root_rank, name, process_set, False)
        if done is not None:
            return done
    return path_of(x).broadcast(x, root_rank, name, process_set, sync=True)


def broadcast_(x, root_rank, name=None, process_set=global_process_set):
    lean = runtime.lean
    if lean is not None:
        done = lean.broadcast(x, root_rank, name, process_set, True)
        if done is not None:
            return done
    return path_of(x).broadcast(x, root_rank, name, process_set, inplace=True, sync=True)


def alltoall_async(x, splits=None, name=None, process_set=global_process_set):
    """Start sending splits[i] rows of `x` (along the first dimension) to rank i (within a
    process set: to its i-th rank); without splits, equal parts. The result is the received
    rows, in rank order; with splits given, the handle's result is (rows, received_splits)."""
    return path_of(x).alltoall(x, splits, name, process_set)


def alltoall(x, splits=None, name=None, process_set=global_process_set):
    lean = runtime.lean
    if lean is not None:
        done = lean.alltoall(x, splits, name, process_set)
        if done is not None:
            return done
    return path_of(x).alltoall(x, splits, name, process_set, sync=True)


def reducescatter_async(x, op=Average, name=None, process_set=global_process_set):
    """Start reducing `x` across the set's ranks and keeping this rank's block of rows (the first
    dimension split into size blocks, the first `rows % size` one row longer)."""
    return path_of(x).reducescatter(x, op, name, process_set)


def reducescatter(x, op=Average, name=None, process_set=global_process_set):
    lean = runtime.lean
    if lean is not None:
        done = lean.reducescatter(x, op, name, process_set)
        if done is not None:
            return done
    return path_of(x).reducescatter(x, op, name, process_set, sync=True)


# ---- barrier, join, objects ---------------------------------------------------------------

barrier_async = host.barrier_async


def join_async():
    """join() as a handle. This rank's device collectives are run first, and at synchronize()
    the ranks' device orders agree again (gpu/worker.agree_order: the joined ranks did not
    count the device all-reduces that ran meanwhile)."""
    rt = runtime.current()
    st = rt.global_state
    w = getattr(st, "_gpu_worker", None)
    if w is not None:
        w.drain()
    gpu_worker.before_join(rt)

    def agree(last):
        gpu_worker.agree_order(st, lambda a: host.allreduce_async_(
            a, ReduceOp.Max, "join.device_order", None, global_process_set, sync=True))
        return last
    return Mapped(host.join_async(), agree)


def barrier(process_set=global_process_set):
    """Wait until every rank of the set has called barrier()."""
    lean = runtime.lean
    if lean is None or lean.barrier(process_set) is None:
        host.barrier_async(process_set, sync=True)


def join():
    """This rank has run out of data: until every rank has joined, it takes part in the others'
    all-reduces contributing the op's identity (zeros for Sum and Average, whose divisor is still
    the set's size, as in Horovod); any other collective the others start meanwhile fails,
    naming the joined ranks. Returns the last rank to join."""
    return join_async().synchronize()


def _object_name(st, kind, name):
    """An object collective's base name: its steps are named base.size and base.data (a name
    that is not a string is used as str(name), like the array collectives do)."""
    return st.auto_name(kind) if name is None or name == "" else str(name)


def dump_object(obj):
    """pickle's bytes, by cloudpickle where it is installed (as Horovod's object collectives
    and horovod.run pickle): lambdas, closures and classes from `__main__` travel by value.
    Either is read back by pickle.loads."""
    try:
        import cloudpickle
    except ImportError:
        return pickle.dumps(obj)
    return cloudpickle.dumps(obj)


def _pickled(obj, st, kind, name, root=0):
    """obj pickled into bytes; a pickling failure poisons the first step (name.size), so the
    other ranks fail too instead of waiting for it."""
    try:
        return np.frombuffer(dump_object(obj), dtype=np.uint8)
    except Exception as e:      # noqa: BLE001 - any pickling failure
        error = InvalidArgumentError(f"{_KIND_NAMES[kind]} {name!r}: cannot pickle the object: "
                                     f"{type(e).__name__}: {e}")
        host._poison(st, kind, name + ".size", error, root=root)


_KIND_NAMES = {BROADCAST: "broadcast_object", ALLGATHER: "allgather_object"}


def _same_runtime(rt, what):
    """A chain's second step goes to the runtime its first went to: after a shutdown (and a
    re-init) meanwhile it fails instead of landing in the new one."""
    if runtime._current is not rt:
        raise ShutdownError(f"{what}: hvlite was shut down before the second step went out")


def broadcast_object_async(obj, root_rank=0, name=None, process_set=global_process_set):
    rt = runtime.current()
    st = state_of(rt, process_set, "broadcast_object")
    name = _object_name(st, "broadcast_object", name)
    mine = rt.rank == root_rank
    data = _pickled(obj, st, BROADCAST, name, host._root(st, root_rank)) if mine else None
    first = broadcast_async(np.array([0 if data is None else data.size], np.int64), root_rank,
                            name + ".size", process_set)

    def then(size):
        _same_runtime(rt, f"broadcast_object {name!r}")
        got = broadcast(data if mine else np.empty(int(size[0]), np.uint8), root_rank,
                        name + ".data", process_set)
        return obj if mine else pickle.loads(got.tobytes())
    return ChainHandle(first, then)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Pickle `obj` on root_rank and return the unpickled copy on every rank of the set."""
    return broadcast_object_async(obj, root_rank, name, process_set).synchronize()


def allgather_object_async(obj, name=None, process_set=global_process_set):
    rt = runtime.current()
    st = state_of(rt, process_set, "allgather_object")
    name = _object_name(st, "allgather_object", name)
    data = _pickled(obj, st, ALLGATHER, name)
    first = allgather_async(np.array([data.size], np.int64), name + ".size", process_set)

    def then(sizes):
        _same_runtime(rt, f"allgather_object {name!r}")
        blob = allgather(data, name + ".data", process_set).tobytes()
        out, off = [], 0
        for s in sizes:
            out.append(pickle.loads(blob[off:off + int(s)]))
            off += int(s)
        return out
    return ChainHandle(first, then)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Pickle `obj` on every rank of the set and return the list of their objects, in rank
    order."""
    return allgather_object_async(obj, name, process_set).synchronize()



def add_process_set(process_set):
    """Create a process set from a ProcessSet or a list of ranks and return the ProcessSet.
    Every rank calls it, in the same order; needs dynamic process sets. The ranks agree on it
    through the global set's coordinator, so a rank that failed (or left) instead of calling it
    fails every other rank's call with hvlite's error, never a wait without end."""
    return runtime.add_process_set(process_set, _agreement("add_process_set"))


def remove_process_set(process_set):
    """Remove a process set on every rank (all call it, in the same order); returns whether it
    was removed. The global set is never removed (False), as in Horovod. Agreed as
    add_process_set is."""
    return runtime.remove_process_set(process_set, _agreement("remove_process_set"))


def _agreement(what):
    return lambda obj: allgather_object(obj, name=f"hvlite.{what}",
                                        process_set=global_process_set)
