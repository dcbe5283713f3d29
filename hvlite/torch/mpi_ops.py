"""Horovod's torch collectives on hvlite, with Horovod's names, arguments and return values.

The out-of-place forms are autograd functions whose backward is the matching collective, with
Horovod's conventions: allreduce -> the same allreduce of the gradient; allgather -> the
gradient averaged across ranks, this rank's rows; broadcast -> the averaged gradient on the root,
zeros elsewhere; alltoall -> alltoall back with the received splits; reducescatter -> allgather
(times the set's size for Sum).
"""
import numpy as np
import torch

import hvlite as _hv
from hvlite import collectives as _coll
from hvlite.errors import InvalidArgumentError
from hvlite.ops import Adasum, Average, Max, Min, Sum
from hvlite.torch import _bridge as B
from hvlite.torch.compression import Compression

global_process_set = getattr(_hv, "global_process_set", None)


# ---- allreduce ------------------------------------------------------------------------------

# CPU tensors of these dtypes are plain NumPy arrays (bool and bfloat16 are views of another
# dtype: the general path).
_PLAIN = frozenset((torch.float16, torch.float32, torch.float64, torch.int8, torch.int16,
                    torch.int32, torch.int64, torch.uint8))


def _plain(tensor, prescale_factor=1.0, postscale_factor=1.0, compression=None):
    """The NumPy view a call hands to the NumPy face as it is, or None: a contiguous CPU tensor
    of a plain dtype, no scaling, no compression (the synchronous forms but autograd's, and
    allreduce_async_). The general path's handle, its finish and the checks a tensor of any
    kind needs cost a 1 KB call 7-12 us over the NumPy call's 1-2 us (docs/benchmarks.md, "The
    torch layer"); out of place the result is the NumPy face's own array, written in one pass,
    not a copy reduced in place."""
    if not (isinstance(tensor, torch.Tensor) and tensor.is_cpu and not B.on_device(tensor)
            and tensor.dtype in _PLAIN and not tensor.is_sparse and tensor.is_contiguous()
            and prescale_factor == 1.0 and postscale_factor == 1.0
            and not B.compression_kwargs(compression)):
        return None
    return tensor.detach().numpy() if tensor.requires_grad else tensor.numpy()


_CAST_METHODS = frozenset(("fp16", "bf16"))


def _numpy_set(process_set):
    return global_process_set if process_set is None else process_set


def _allreduce_async(tensor, out, name, op, prescale_factor, postscale_factor, process_set,
                     compression=None):
    """Reduce into `out` (the tensor itself when in place), scaling before and after."""
    if op == Adasum and isinstance(tensor, torch.Tensor) and B.on_device(tensor):
        return _device_adasum(tensor, out, name, prescale_factor, postscale_factor, process_set)
    src = B.view(tensor, _coll.ALLREDUCE, name, allow_bool=op in (Min, Max),
                 process_set=process_set)
    if out is not tensor:
        out.copy_(tensor.detach())
    B.scale_(out, prescale_factor)
    kw = dict(B.ps_kwargs(process_set), **B.compression_kwargs(compression))
    if kw.get("compression") and (B.on_device(out) or B.foreign_compressor(compression)):
        return _compressed_in_torch(out, name, op, postscale_factor, process_set, compression)
    arr = src if out is tensor else B.view(out, _coll.ALLREDUCE, name,
                                                        process_set=process_set)

    def finish(result):     # in `out` already: a compressed result is cast straight into it
        return B.scale_(out, postscale_factor)
    return B.TorchHandle(_hv.allreduce_async_(arr, op=op, name=name, **kw), finish)


def _device_adasum(tensor, out, name, prescale_factor, postscale_factor, process_set):
    """Adasum of a CUDA tensor: reduced on a host copy (the core's Adasum takes host memory),
    the result copied back into `out` at synchronize()."""
    host, arr = B.host_copy(tensor)
    B.scale_(host, prescale_factor)
    h = _hv.allreduce_async_(arr, op=Adasum, name=name, **B.ps_kwargs(process_set))

    def finish(_result):
        out.copy_(host)
        return B.scale_(out, postscale_factor)
    return B.TorchHandle(h, finish)


def _compressed_in_torch(out, name, op, postscale_factor, process_set, compression):
    """Horovod's way: the compressor's own compress/decompress around a plain reduction of the
    compressed tensor. For a CUDA tensor (cast on its device, reduced on the device path:
    hvlite.compression's exchanges take host arrays), and for a compressor of Horovod's
    protocol only (a user's class), on any device."""
    try:
        low, ctx = compression.compress(out)
    except (NotImplementedError, AttributeError, TypeError) as e:
        why = (f"{compression!r} cannot compress this tensor ({e})"
               if B.foreign_compressor(compression) else
               f"{compression!r} takes CPU tensors; CUDA tensors take Compression.none or fp16 "
               f"({e})")
        B.poisoned(_coll.ALLREDUCE, name, InvalidArgumentError(f"allreduce {name!r}: {why}"),
                   process_set, out)
    if not isinstance(low, torch.Tensor):
        B.poisoned(_coll.ALLREDUCE, name, InvalidArgumentError(
            f"allreduce {name!r}: {compression!r}.compress returned "
            f"{type(low).__name__}, not a tensor"), process_set, out)
    low = low.contiguous()
    h = _hv.allreduce_async_(B.view(low, _coll.ALLREDUCE, name, process_set=process_set),
                             op=op, name=name, **B.ps_kwargs(process_set))

    def finish(_result):
        out.copy_(compression.decompress(low, ctx))
        return B.scale_(out, postscale_factor)
    return B.TorchHandle(h, finish)


def _dense(tensor):
    """A strided tensor on the CPU or a GPU: one a new contiguous tensor can be made like.
    Sparse ones and others are refused by the checks, which tell every rank."""
    return (isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided
            and tensor.device.type in ("cpu", "cuda"))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set, compression=None):
    """Start an allreduce into a new tensor; returns a handle for poll()/synchronize()."""
    op = B.resolve_op(op, average)
    arr = _plain(tensor, prescale_factor, postscale_factor, compression)
    if arr is not None:     # the NumPy face's call; its result array becomes the tensor
        return B.AsTensor(_coll.allreduce_async(arr, op, name, None, _numpy_set(process_set)))
    out = torch.empty_like(tensor, memory_format=torch.contiguous_format) \
        if _dense(tensor) else tensor       # (the others: refused below, on every rank)
    return _allreduce_async(tensor, out, name, op, prescale_factor, postscale_factor,
                            process_set, compression)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set, compression=None):
    """Start an allreduce in place on `tensor`."""
    op = B.resolve_op(op, average)
    arr = _plain(tensor, prescale_factor, postscale_factor)
    if arr is not None:
        if not B.compression_kwargs(compression):
            # DistributedOptimizer's hooks, every gradient: the NumPy face's call
            return B.Returning(_coll.allreduce_async_(arr, op, name, None,
                                                      _numpy_set(process_set)), tensor)
        if getattr(compression, "method", None) in _CAST_METHODS:
            # the same with compression=fp16 or bf16: the compressor's lean way (the cast, the
            # submit and a handle that casts back and returns the tensor, in one C call), else
            # its own call on the tensor's NumPy view, as the general path ends up making it
            ps = _numpy_set(process_set)
            h = compression.inner.lean_async(arr, arr, op, name, ps, tensor)
            if h is not None:
                return h
            return B.Returning(compression.inner.allreduce_async(
                arr, op=op, name=name, out=arr, process_set=ps), tensor)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor,
                            process_set, compression)


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, pre, post, process_set, compression):
        ctx.args = (op, pre, post, process_set)
        return allreduce_async(tensor, None, name, op, pre, post, process_set,
                               compression).synchronize()

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, ps = ctx.args
        return (allreduce(grad, op=op, prescale_factor=pre, postscale_factor=post,
                          process_set=ps), None, None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """A new tensor: `tensor` reduced across ranks (Average unless op= says otherwise)."""
    op = B.resolve_op(op, average)
    if isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled():
        return _Allreduce.apply(tensor, name, op, prescale_factor, postscale_factor,
                                process_set, compression)
    arr = _plain(tensor, prescale_factor, postscale_factor, compression)
    if arr is not None:
        # the NumPy result (from the output pool, reused by name once nothing holds it: this
        # tensor holds it while it lives) as the new tensor
        return torch.from_numpy(_coll.allreduce(arr, op, name, None, _numpy_set(process_set)))
    return allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor,
                           process_set, compression).synchronize()


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set, compression=None):
    """Reduce `tensor` in place and return it."""
    op = B.resolve_op(op, average)
    arr = _plain(tensor, prescale_factor, postscale_factor, compression)
    if arr is not None:
        _coll.allreduce_(arr, op, name, None, _numpy_set(process_set))
        return tensor
    return allreduce_async_(tensor, None, name, op, prescale_factor, postscale_factor,
                            process_set, compression).synchronize()


def _grouped_allreduce_async(tensors, average, name, op, pre, post, process_set, inplace,
                             compression=None):
    op = B.resolve_op(op, average, "grouped_allreduce")
    base = B.group_base(name, "grouped_allreduce")
    if not isinstance(tensors, (list, tuple)):      # a lone tensor would split into rows
        B.poisoned(_coll.ALLREDUCE, f"{base}.0", InvalidArgumentError(
            f"grouped_allreduce {base!r}: needs a list of tensors, got {type(tensors).__name__}"),
            process_set)
    B.one_device(tensors, _coll.ALLREDUCE, base, process_set)
    arrs = [_plain(t, pre, post, compression) for t in tensors]
    if arrs and all(a is not None for a in arrs):   # every part a plain CPU tensor
        return _plain_group(tensors, arrs, op, base, _numpy_set(process_set), inplace)
    start = allreduce_async_ if inplace else allreduce_async
    return B.GroupHandle(_every_part(lambda i, t: start(
        t, None, f"{base}.{i}", op, pre, post, process_set, compression), tensors))


def _every_part(start, parts):
    """start(i, part) for every part of a group, each sent out (poisoned if rejected) even after
    one failed, so no rank is left waiting for the parts after a bad one; the first error is
    raised once every part is out."""
    handles, first = [], None
    for i, part in enumerate(parts):
        try:
            handles.append(start(i, part))
        except Exception as e:          # noqa: BLE001 - raised once every part is out
            first = first or e
    if first is not None:
        raise first
    return handles


def _plain_group(tensors, arrs, op, base, process_set, inplace):
    """A group of plain CPU tensors through the NumPy face, under the names the general path
    gives its parts (base.i), so that ranks taking either path agree (docs/benchmarks.md, "The
    torch layer")."""
    if not inplace:
        return B.AsTensor(_coll.grouped_allreduce_async(arrs, op, base, None, process_set))
    return B.Returning(B.GroupHandle(_every_part(lambda i, a: _coll.allreduce_async_(
        a, op, f"{base}.{i}", None, process_set), arrs)), list(tensors))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Start reducing a list of tensors as one group (negotiated and fused together)."""
    return _grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set, False)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set, True)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, pre, post, process_set, *tensors):
        ctx.args = (op, pre, post, process_set)
        return tuple(grouped_allreduce_async(list(tensors), None, name, op, pre, post,
                                             process_set).synchronize())

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, ps = ctx.args
        return (None,) * 5 + tuple(grouped_allreduce(list(grads), op=op, prescale_factor=pre,
                                                     postscale_factor=post, process_set=ps))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """New tensors: each of `tensors` reduced across ranks, as one group."""
    op = B.resolve_op(op, average, "grouped_allreduce")
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                       for t in tensors):
        return list(_GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor,
                                            process_set, *tensors))
    return _grouped_allreduce_async(tensors, None, name, op, prescale_factor, postscale_factor,
                                    process_set, False, compression).synchronize()


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set).synchronize()


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduce a sparse COO tensor by gathering every rank's indices and values (as Horovod
    does); synchronize() returns the summed (or averaged) sparse tensor."""
    op = B.check_op(op, "sparse_allreduce_async")
    if op == Adasum:        # its values are gathered and summed: no dot products to take
        raise InvalidArgumentError(f"sparse_allreduce_async {name!r}: op=Adasum needs dense "
                                   "tensors (sparse_as_dense=True, or .to_dense())")
    t = tensor.coalesce()
    values = t.values() / B.ps_size(process_set) if op == Average else t.values()
    hi = allgather_async(t.indices().t().contiguous(), name=f"{name}.indices",
                         process_set=process_set)
    hv = allgather_async(values.contiguous(), name=f"{name}.values", process_set=process_set)

    def result(parts):
        idx, val = parts
        return torch.sparse_coo_tensor(idx.t(), val, t.size(), check_invariants=False).coalesce()
    return B.Composite([hi, hv], result)     # called, as in Horovod: handle() is the result


# ---- allgather ------------------------------------------------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Start concatenating every rank's tensor along dimension 0 (which may differ by rank)."""
    arr = B.view(tensor, _coll.ALLGATHER, name, process_set=process_set)
    dtype = tensor.dtype
    return B.TorchHandle(_hv.allgather_async(arr, name=name, **B.ps_kwargs(process_set)),
                         lambda a: B.to_tensor(a, dtype))


def _rows_before(dims, process_set):
    return int(sum(dims[:B.ps_rank(process_set)]))


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim, ctx.ps = tensor.shape[0] if tensor.dim() else 1, process_set
        return allgather_async(tensor, name, process_set).synchronize()

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad, op=Average, process_set=ctx.ps)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), process_set=ctx.ps)
        return reduced.narrow(0, _rows_before(dims.tolist(), ctx.ps), ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's tensor concatenated along dimension 0, in rank order."""
    if isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled():
        return _Allgather.apply(tensor, name, process_set)
    arr = _plain(tensor)
    if arr is not None:
        return B.to_tensor(_coll.allgather(arr, name, _numpy_set(process_set)), tensor.dtype)
    return allgather_async(tensor, name, process_set).synchronize()


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    base = B.group_base(name, "grouped_allgather")
    B.one_device(tensors, _coll.ALLGATHER, base, process_set)
    return B.GroupHandle([allgather_async(t, f"{base}.{i}", process_set)
                          for i, t in enumerate(tensors)])


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims, ctx.ps = [t.shape[0] for t in tensors], process_set
        return tuple(grouped_allgather_async(list(tensors), name, process_set).synchronize())

    @staticmethod
    def backward(ctx, *grads):
        reduced = grouped_allreduce(list(grads), op=Average, process_set=ctx.ps)
        dims = allgather(torch.tensor(ctx.dims, dtype=torch.int64).view(1, -1),
                         process_set=ctx.ps)
        out = [g.narrow(0, _rows_before(dims[:, i].tolist(), ctx.ps), d)
               for i, (g, d) in enumerate(zip(reduced, ctx.dims))]
        return (None, None) + tuple(out)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return list(_GroupedAllgather.apply(name, process_set, *tensors))
    return grouped_allgather_async(tensors, name, process_set).synchronize()


# ---- broadcast ------------------------------------------------------------------------------

def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Start overwriting `tensor` with root_rank's, in place."""
    arr = B.view(tensor, _coll.BROADCAST, name, process_set=process_set)
    if not B.contiguous(arr):
        B.poisoned(_coll.BROADCAST, name, InvalidArgumentError(
            f"broadcast_ {name or ''}: the tensor is not contiguous; use broadcast()"), process_set,
            tensor)
    return B.TorchHandle(_hv.broadcast_async_(arr, root_rank, name=name,
                                              **B.ps_kwargs(process_set)),
                         lambda a: tensor)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Start copying root_rank's tensor into a new tensor on every rank."""
    if _dense(tensor):
        tensor = tensor.detach().clone(memory_format=torch.contiguous_format)
    return broadcast_async_(tensor, root_rank, name, process_set)


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root, ctx.ps = root_rank, process_set
        return broadcast_async(tensor, root_rank, name, process_set).synchronize()

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad, op=Average, process_set=ctx.ps)
        if _hv.rank() != ctx.root:
            reduced = torch.zeros_like(reduced)
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """A new tensor holding root_rank's `tensor`, on every rank."""
    if isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled():
        return _Broadcast.apply(tensor, root_rank, name, process_set)
    arr = _plain(tensor)
    if arr is not None:
        return B.to_tensor(_coll.broadcast(arr, root_rank, name, _numpy_set(process_set)),
                           tensor.dtype)
    return broadcast_async(tensor, root_rank, name, process_set).synchronize()


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrite `tensor` with root_rank's and return it."""
    arr = _plain(tensor)
    if arr is not None:
        _coll.broadcast_(arr, root_rank, name, _numpy_set(process_set))
        return tensor
    return broadcast_async_(tensor, root_rank, name, process_set).synchronize()


# ---- alltoall ---------------------------------------------------------------------------------

def _alltoall_splits(tensor, arr, splits, name, process_set):
    """The splits the NumPy call takes: explicit for equal parts too, so the received splits
    come back; a tensor's as a list (integers only: other kinds poison the call)."""
    n = B.ps_size(process_set)
    rows = arr.shape[0] if arr.ndim else 1
    if splits is None and rows % n == 0:
        return [rows // n] * n
    if isinstance(splits, torch.Tensor):
        if splits.is_complex() or splits.dtype == torch.bool or splits.is_floating_point() and (
                not torch.equal(splits, splits.trunc())):
            B.poisoned(_coll.ALLTOALL, name, InvalidArgumentError(
                f"alltoall {name or ''}: splits must hold integers, got {splits.dtype}"), process_set,
                tensor)
        splits = splits.tolist()
    if isinstance(splits, (list, tuple)):       # Horovod makes int32 of them: 2.0 is 2
        splits = [int(s) if isinstance(s, float) and s.is_integer() else s for s in splits]
    return splits


def _alltoall_result(res, dtype, splits=None):
    """(rows, received splits): the splits as int32 on the CPU, or, for splits given as a
    tensor, in its dtype on its device (Horovod's `splits.new()`)."""
    out, got = res
    got = np.asarray(got)
    if isinstance(splits, torch.Tensor):
        return B.to_tensor(out, dtype), torch.tensor(got.tolist(), dtype=splits.dtype,
                                                     device=splits.device)
    return B.to_tensor(out, dtype), torch.from_numpy(got.astype("int32"))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Start sending splits[i] rows of `tensor` to rank i (equal parts without splits).
    synchronize() returns (received rows, received splits: int32 on the CPU, or like the
    splits tensor given)."""
    arr = B.view(tensor, _coll.ALLTOALL, name, process_set=process_set)
    given = splits
    splits = _alltoall_splits(tensor, arr, splits, name, process_set)
    dtype = tensor.dtype
    h = _hv.alltoall_async(arr, splits, name=name, **B.ps_kwargs(process_set))
    return B.TorchHandle(h, lambda res: _alltoall_result(res, dtype, given))


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = alltoall_async(tensor, splits, name, process_set).synchronize()
        ctx.received, ctx.ps = received, process_set
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, *_unused):
        back, _ = alltoall(grad.contiguous(), splits=ctx.received, process_set=ctx.ps)
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """The rows every rank sent this rank, in rank order; with splits given, also the number of
    rows received from each rank."""
    if isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled():
        return _Alltoall.apply(tensor, splits, name, process_set)
    arr = _plain(tensor)
    if arr is not None and splits is None:      # equal parts, the rows alone come back
        return B.to_tensor(_coll.alltoall(arr, None, name, _numpy_set(process_set)),
                           tensor.dtype)
    if arr is not None:
        out, received = _alltoall_result(
            _coll.alltoall(arr, _alltoall_splits(tensor, arr, splits, name, process_set), name,
                           _numpy_set(process_set)), tensor.dtype, splits)
    else:
        out, received = alltoall_async(tensor, splits, name, process_set).synchronize()
    return out if splits is None else (out, received)


# ---- reducescatter ----------------------------------------------------------------------------

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Start reducing across ranks and keeping this rank's block of rows (the first
    `rows % size` ranks get one row more)."""
    op = B.check_op(op, "reducescatter")
    arr = B.view(tensor, _coll.REDUCESCATTER, name, allow_bool=op in (Min, Max),
                 process_set=process_set)
    if arr.ndim == 0:           # no rows to scatter; Horovod refuses it on every rank too
        label = f"reducescatter {name!r}" if name else "reducescatter"
        B.poisoned(_coll.REDUCESCATTER, name, B.ScalarError(
            f"{label}: a 0-d tensor has no rows to scatter (reshape it to one dimension)"),
            process_set, tensor)
    if prescale_factor != 1.0:
        arr = B.view(B.scale_(tensor.detach().clone(), prescale_factor), _coll.REDUCESCATTER,
                     name, process_set=process_set)
    dtype = tensor.dtype
    h = _hv.reducescatter_async(arr, op=op, name=name, **B.ps_kwargs(process_set))
    return B.TorchHandle(h, lambda a: B.scale_(B.to_tensor(a, dtype), postscale_factor))


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, pre, post):
        ctx.args = (op, process_set, pre, post)
        return reducescatter_async(tensor, name, op, process_set, pre, post).synchronize()

    @staticmethod
    def backward(ctx, grad):
        op, ps, pre, post = ctx.args
        scale = (B.ps_size(ps) if op == Sum else 1) * pre * post
        return allgather(grad * scale if scale != 1 else grad, process_set=ps), \
            None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """This rank's block of rows of `tensor` reduced across ranks."""
    op = B.check_op(op, "reducescatter")
    tensor, ctx = _compress(compression, tensor, "reducescatter")
    arr = _plain(tensor, prescale_factor, postscale_factor) if ctx is _NO_CTX else None
    if isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled():
        out = _Reducescatter.apply(tensor, name, op, process_set, prescale_factor,
                                   postscale_factor)
    elif arr is not None and arr.ndim:      # (a 0-d tensor: refused as Horovod does, below)
        out = B.to_tensor(_coll.reducescatter(arr, op, name, _numpy_set(process_set)),
                          tensor.dtype)
    else:
        out = reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                  postscale_factor).synchronize()
    return out if ctx is _NO_CTX else compression.decompress(out, ctx)


_NO_CTX = object()


def _compress(compression, tensor, where):
    """Horovod's compressor protocol (compress -> (tensor, ctx), decompress(tensor, ctx)),
    applied around the reduce-scatter as Horovod does."""
    if not B.compression_kwargs(compression):
        return tensor, _NO_CTX
    if not (hasattr(compression, "compress") and hasattr(compression, "decompress")):
        raise NotImplementedError(f"{where}: compression {compression!r} has no "
                                  "compress/decompress; use Compression.none")
    return compression.compress(tensor)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    base = B.group_base(name, "grouped_reducescatter")
    B.one_device(tensors, _coll.REDUCESCATTER, base, process_set)
    return B.GroupHandle(_every_part(lambda i, t: reducescatter_async(
        t, f"{base}.{i}", op, process_set, prescale_factor, postscale_factor), tensors))


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, pre, post, *tensors):
        ctx.args = (op, process_set, pre, post)
        return tuple(grouped_reducescatter_async(list(tensors), name, op, process_set, pre,
                                                 post).synchronize())

    @staticmethod
    def backward(ctx, *grads):
        op, ps, pre, post = ctx.args
        scale = (B.ps_size(ps) if op == Sum else 1) * pre * post
        return (None,) * 5 + tuple(grouped_allgather([g * scale for g in grads],
                                                     process_set=ps))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    op = B.check_op(op, "grouped_reducescatter")
    pairs = [_compress(compression, t, "grouped_reducescatter") for t in tensors]
    tensors = [t for t, _ in pairs]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        outs = list(_GroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                                postscale_factor, *tensors))
    else:
        outs = grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                           postscale_factor).synchronize()
    return [o if ctx is _NO_CTX else compression.decompress(o, ctx)
            for o, (_, ctx) in zip(outs, pairs)]


# ---- join, barrier, handles -------------------------------------------------------------------

def join(device=-1):
    """This rank is out of data; returns the last rank to join. `device` is accepted for
    Horovod's signature (hvlite runs on CPU)."""
    return int(_hv.join())


def barrier(process_set=global_process_set):
    """Wait for every rank (of the process set)."""
    kw = B.ps_kwargs(process_set)
    _hv.barrier(**kw) if kw else _hv.barrier()


def poll(handle):
    """True when the collective behind `handle` has finished."""
    return handle.poll()


def synchronize(handle):
    """Wait for `handle` and return its result."""
    return handle.synchronize()
