"""hvlite for PyTorch under Horovod's names: `import hvlite.torch as hvd` in place of
`import horovod.torch as hvd`. CPU and CUDA tensors (CUDA through CuPy); see the README's
migration table for the rest."""
import torch

import hvlite as _hv
from hvlite import (Average, Max, Min, Product, Sum, cross_rank, cross_size,  # noqa: F401
                    is_initialized, local_rank, local_size, mpi_threads_supported, rank,
                    shutdown, size, start_timeline, stop_timeline)
from hvlite.errors import InternalError as HorovodInternalError  # noqa: F401
from hvlite.torch._bridge import Adasum  # noqa: F401
from hvlite.torch.compression import Compression  # noqa: F401
from hvlite.torch import elastic  # noqa: F401
from hvlite.torch.functions import (allgather_object, broadcast_object,  # noqa: F401
                                    broadcast_optimizer_state, broadcast_parameters)
from hvlite.torch.mpi_ops import (allgather, allgather_async, allreduce, allreduce_,  # noqa: F401
                                  allreduce_async, allreduce_async_, alltoall, alltoall_async,
                                  barrier, broadcast, broadcast_, broadcast_async,
                                  broadcast_async_, grouped_allgather, grouped_allgather_async,
                                  grouped_allreduce, grouped_allreduce_,
                                  grouped_allreduce_async, grouped_allreduce_async_,
                                  grouped_reducescatter, grouped_reducescatter_async, join,
                                  poll, reducescatter, reducescatter_async,
                                  sparse_allreduce_async, synchronize)
from hvlite.torch.optimizer import DistributedOptimizer  # noqa: F401
from hvlite.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401

# Process sets live in the core; re-exported where this build has them.
for _name in ("ProcessSet", "global_process_set", "add_process_set", "remove_process_set"):
    if hasattr(_hv, _name):
        globals()[_name] = getattr(_hv, _name)


def init(comm=None, process_sets=None):
    """Start hvlite (idempotent). `comm`: an mpi4py communicator (COMM_WORLD by default)
    or a list of COMM_WORLD's ranks;
    `process_sets`: static process sets, as in Horovod."""
    if process_sets is None:
        _hv.init(comm)
    else:
        _hv.init(comm, process_sets=process_sets)


# What this build is made of, answered truthfully: MPI only, CPU only.
def mpi_enabled():
    return True


def mpi_built():
    return True


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """True where CUDA tensors can run here: the device path needs CuPy (hvlite's [cuda] extra)
    and a CUDA build of torch."""
    import importlib.util
    return bool(torch.version.cuda) and importlib.util.find_spec("cupy") is not None


def rocm_built():
    return False
