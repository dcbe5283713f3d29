"""Tensors to the collectives' operands and back, Horovod's argument conventions, and handles
whose result is a tensor.

CPU tensors reach the collectives as NumPy views of their memory (no copy when contiguous);
bfloat16 goes through ml_dtypes and bool through uint8, the dtypes NumPy or the core lack.
CUDA tensors go as they are (bool as uint8, bfloat16 as int16 where no reduction happens):
hvlite.route sends them down the device path, which returns torch tensors on their device.
"""
import warnings

import numpy as np
import torch

import hvlite as _hv
from hvlite import collectives as _coll
from hvlite import route as _route
from hvlite._core.codes import COLLECTIVES
from hvlite.work import Composite, GroupHandle, Mapped, Over, Work  # noqa: F401  (one protocol, shared)
from hvlite.errors import InvalidArgumentError
from hvlite.ops import Adasum, Average, Sum, as_op  # noqa: F401  (Adasum: hvd.Adasum)
from hvlite.torch.compression import Compression, NoneCompressor, TorchCompressor


class DeviceError(InvalidArgumentError, RuntimeError):
    """A tensor on a device hvlite cannot reach. Horovod reports a CPU/GPU mix as a
    RuntimeError; hvlite's argument errors are ValueErrors: this is both."""


class ScalarError(InvalidArgumentError, RuntimeError):
    """A 0-d tensor where rows are needed (reducescatter): Horovod reports it as a RuntimeError,
    hvlite's argument errors are ValueErrors: this is both."""


_GLOBAL = getattr(_hv, "global_process_set", None)


def check_op(op, where):
    return as_op(op)


def resolve_op(op, average, where="allreduce"):
    """Horovod's rule: `average` is the deprecated spelling of op; giving both is an error."""
    if op is not None and average is not None:
        raise ValueError(f"{where}: the op parameter supersedes average; give only one")
    if average is not None:
        warnings.warn("hvd.allreduce(average=...) is deprecated; use op=hvd.Average or "
                      "op=hvd.Sum", DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return check_op(Average if op is None else op, where)


def ps_kwargs(process_set):
    """The process_set keyword for the NumPy API: only for a set other than the global one."""
    if process_set is None or process_set is _GLOBAL:
        return {}
    if getattr(process_set, "process_set_id", None) == 0:
        return {}
    return {"process_set": process_set}


def ps_size(process_set):
    return _hv.size() if not ps_kwargs(process_set) else process_set.size()


def ps_rank(process_set):
    return _hv.rank() if not ps_kwargs(process_set) else process_set.rank()


def compression_kwargs(compression):
    """The compression keyword for hvlite.allreduce_async: only for a real compressor."""
    if compression is None or compression is Compression.none or compression is NoneCompressor:
        return {}
    return {"compression": compression}


def foreign_compressor(compression):
    """A compressor that speaks only Horovod's protocol (compress/decompress: a user's class),
    not hvlite's exchange: its casts run in torch around a plain reduction, as in Horovod."""
    return bool(compression_kwargs(compression)) and not isinstance(compression, TorchCompressor)


def on_device(t):
    """True for a tensor whose collectives take the device path (CUDA memory)."""
    return t.is_cuda


def poisoned(kind, name, error, process_set=None, tensor=None):
    """Fail this rank's part of a collective before it reaches the runtime: the request still
    goes out poisoned under its name on its process set, down the path `tensor` would have
    taken, so the other members' handles fail instead of waiting (and no other set is
    touched), and this rank raises `error`."""
    device = isinstance(tensor, torch.Tensor) and on_device(tensor)
    path = _route.path_of(tensor) if device else _route.HOST
    path.poison(kind, tensor.detach() if device else None, name, error,
                _GLOBAL if process_set is None else process_set)


def view(t, kind, name, allow_bool=True, process_set=None):
    """The operand for tensor `t`: a NumPy view of a CPU tensor's memory, or the CUDA tensor
    itself; a bad tensor poisons the collective."""
    what = COLLECTIVES[kind]           # the core's name table: "allreduce", ...
    label = f"{what} {name!r}" if name else what
    if not isinstance(t, torch.Tensor):
        poisoned(kind, name, InvalidArgumentError(
            f"{label}: expected a torch.Tensor, got {type(t).__name__}"), process_set)
    if t.is_sparse:
        poisoned(kind, name, InvalidArgumentError(
            f"{label}: sparse tensor; use sparse_allreduce_async or .to_dense()"), process_set,
            t if on_device(t) else None)
    if on_device(t):
        return _device_operand(t, kind, label, name, allow_bool, process_set)
    if t.device.type != "cpu":
        poisoned(kind, name, DeviceError(
            f"{label}: tensor on device {t.device}; hvlite.torch handles CPU and CUDA tensors "
            "(move it with .cpu())"), process_set)
    t = t.detach()
    if t.dtype == torch.bool:
        if not allow_bool:
            poisoned(kind, name, InvalidArgumentError(
                f"{label}: bool tensors reduce only with op=hvd.Min or hvd.Max"), process_set)
        return t.view(torch.uint8).numpy()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    try:
        return t.numpy()
    except TypeError as e:
        poisoned(kind, name, _hv.DtypeError(f"{label}: unsupported dtype {t.dtype} ({e})"),
                 process_set)


def _device_operand(t, kind, label, name, allow_bool, process_set):
    """A CUDA tensor as the device path takes it: bool as uint8; bfloat16 as int16 where
    only bits move (the device reductions have no bfloat16)."""
    t = t.detach()
    if t.dtype == torch.bool:
        if not allow_bool:
            poisoned(kind, name, InvalidArgumentError(
                f"{label}: bool tensors reduce only with op=hvd.Min or hvd.Max"), process_set, t)
        return t.view(torch.uint8)
    if t.dtype == torch.bfloat16:
        if kind in (_coll.ALLREDUCE, _coll.REDUCESCATTER):
            poisoned(kind, name, _hv.DtypeError(
                f"{label}: bfloat16 CUDA tensors cannot be reduced on the device here; use "
                "float16 or float32, or reduce a .cpu() copy"), process_set, t)
        return t.view(torch.int16)
    return t


def contiguous(operand):
    """Whether an operand (NumPy view or CUDA tensor) is C-contiguous."""
    if isinstance(operand, torch.Tensor):
        return operand.is_contiguous()
    return operand.flags.c_contiguous


def to_tensor(a, dtype):
    """A tensor of `dtype` over NumPy array `a` (no copy); a device result (already a tensor)
    is viewed as `dtype` (bool and bfloat16 travelled as uint8 and int16)."""
    if isinstance(a, torch.Tensor):
        return a if a.dtype == dtype else a.view(dtype)
    if not a.flags.writeable:
        a = a.copy()
    if dtype == torch.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    if dtype == torch.bool:
        return torch.from_numpy(a.view(np.uint8)).view(torch.bool)
    return torch.from_numpy(a)


def scale_(t, factor):
    """Multiply in place; integer tensors are scaled in float64 and truncated, as Horovod does.
    A float16 tensor on a GPU is scaled by the factor rounded to float16, as Horovod's GPU
    kernel multiplies in half precision (on the CPU Horovod scales in float32, as here)."""
    if factor == 1 or factor == 1.0:
        return t
    if t.is_floating_point():
        if t.dtype == torch.float16 and on_device(t):
            factor = float(np.float16(factor))
        return t.mul_(factor)
    return t.copy_(t.to(torch.float64).mul_(factor))


# An in-flight collective whose result, on synchronize(), is `finish(numpy_result)`.
TorchHandle = Mapped


class Returning(Over):
    """The handle of an in-place call on a tensor: the NumPy face's handle, and the tensor as
    its result (what Mapped does with a function and a list, for the gradient hooks' every
    call: 1 KB allreduce_async_ then synchronize, docs/benchmarks.md "The torch layer")."""

    __slots__ = ("value",)

    def __init__(self, inner, value):
        super().__init__(inner)
        self.value = value

    def _collect(self):
        self.inner.synchronize()        # raises the collective's error as it is
        return self.value

    def _release(self):
        self.inner = self.value = None


def one_device(tensors, kind, base, process_set):
    """Horovod refuses a group whose tensors are on the CPU and a GPU both (a RuntimeError).
    Every part goes out poisoned down its own path, so no rank waits for this one."""
    where = {on_device(t) for t in tensors if isinstance(t, torch.Tensor)}
    if len(where) < 2:
        return
    what = COLLECTIVES[kind]
    error = DeviceError(f"grouped_{what} {base!r}: the tensors are on the CPU and on a GPU; "
                        "a group's tensors must all be on one device")
    for i, t in enumerate(tensors):
        try:
            poisoned(kind, f"{base}.{i}", error, process_set, t)
        except Exception:       # noqa: BLE001 - each part raises once it is out
            pass
    raise error


def host_copy(t):
    """A CPU copy of device tensor `t` and its NumPy view, for what only the host path does
    (Adasum): Horovod reduces GPU tensors with Adasum too."""
    host = torch.empty(t.shape, dtype=t.dtype, device="cpu")
    host.copy_(t.detach())
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return host, host.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return host, host.numpy()


class AsTensor(Over):
    """The handle of an out-of-place call through the NumPy face: its array result as a tensor
    over the same memory (the output pool reuses a name's array only when nothing holds it)."""

    __slots__ = ()

    def _collect(self):
        got = self.inner.synchronize()
        if isinstance(got, list):           # a group's
            return [torch.from_numpy(a) for a in got]
        return torch.from_numpy(got)


def group_base(name, kind):
    return name or _hv._current().auto_name(kind)
