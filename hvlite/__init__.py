"""hvlite: Horovod-style collectives for data-parallel training, over MPI.

    import hvlite as hvd
    hvd.init()
    g = hvd.allreduce(grad)          # average across ranks (op=hvd.Sum to add)
"""
from hvlite.collectives import (Handle, allgather, allgather_async, allgather_object,
                                allgather_object_async, allreduce, allreduce_, allreduce_async,
                                allreduce_async_, alltoall, alltoall_async, barrier, barrier_async,
                                broadcast, broadcast_, broadcast_async, broadcast_async_,
                                broadcast_object, broadcast_object_async, grouped_allreduce,
                                grouped_allreduce_async, join, join_async, poll, reducescatter,
                                reducescatter_async, synchronize)
from hvlite.errors import (ConfigError, DtypeError, DuplicateNameError, ForkedChildError,
                           HostsUpdatedInterrupt, HvliteError, InternalError,
                           InvalidArgumentError, LostRankError, MismatchError, MPIError,
                           MPILibraryError, NotInitializedError, RankFailedError, ShutdownError, StallError,
                           UnsupportedOperationError)
from hvlite.ops import Adasum, Average, Max, Min, Product, ReduceOp, Sum
from hvlite.process_sets import ProcessSet, global_process_set
from hvlite.collectives import add_process_set, remove_process_set
from hvlite.runtime import current as _current, is_initialized, shutdown
from hvlite import runtime as _runtime
from hvlite import timeline
from hvlite.compression import Compression
from hvlite.timeline import start_timeline, stop_timeline
from hvlite import elastic

from hvlite.config import VERSION as __version__


def init(comm=None, process_sets=None):
    """Initialize hvlite (idempotent). `comm`: an mpi4py communicator to work on (COMM_WORLD
    by default) or, as in Horovod, a list of COMM_WORLD's ranks that each call init() with it. MPI is initialized at HVLITE_MPI_THREAD_LEVEL unless mpi4py already did it.
    `process_sets`: ProcessSets to create at once (the same list on every rank), or "dynamic"
    to allow add_process_set()/remove_process_set() later. With HVLITE_TIMELINE set, the
    timeline starts here too."""
    fresh = not _runtime.is_initialized()
    rt = _runtime.init(comm, process_sets)
    s = rt.settings
    if fresh and s.timeline:
        try:
            start_timeline(s.timeline, s.timeline_mark_cycles, s.timeline_all_ranks)
        except InvalidArgumentError as e:       # raised on every rank alike
            shutdown()
            raise ConfigError(f"HVLITE_TIMELINE={s.timeline!r}: {e}") from None


def rank():
    return _runtime.identity().engine.rank


def size():
    return _runtime.identity().engine.size


def local_rank():
    return _runtime.identity().engine.local_rank


def local_size():
    return _runtime.identity().engine.local_size


def cross_rank():
    return _runtime.identity().engine.cross_rank


def cross_size():
    return _runtime.identity().engine.cross_size


def mpi_threads_supported():
    """True when MPI runs at MPI_THREAD_MULTIPLE (Horovod's meaning)."""
    rt = _current()
    return rt.thread_level == rt.MPI.THREAD_MULTIPLE


def mpi_thread_level():
    """The thread level MPI actually provides, e.g. 'MPI_THREAD_SERIALIZED'."""
    return _current().thread_level_name


__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "mpi_threads_supported", "mpi_thread_level",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
    "grouped_allreduce_async", "allgather", "allgather_async", "broadcast", "broadcast_",
    "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "barrier", "barrier_async", "join", "join_async", "broadcast_object",
    "broadcast_object_async", "allgather_object", "allgather_object_async", "poll",
    "synchronize", "Handle", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set", "Compression", "timeline", "start_timeline", "stop_timeline", "ReduceOp", "Sum", "Average", "Min", "Max", "Product", "Adasum",
    "HvliteError", "NotInitializedError", "ConfigError", "DtypeError", "InvalidArgumentError",
    "DuplicateNameError", "ForkedChildError", "InternalError", "UnsupportedOperationError",
    "MismatchError", "MPIError", "MPILibraryError", "ShutdownError", "StallError", "LostRankError", "RankFailedError",
    "HostsUpdatedInterrupt", "elastic",
]
