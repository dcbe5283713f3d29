"""Making ranks identical: parameters, optimizer state and picklable objects."""
import torch

import hvlite as _hv
from hvlite.torch import _bridge as B
from hvlite.torch.mpi_ops import broadcast_async_, global_process_set


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's `obj` (pickled) on every rank."""
    return _hv.broadcast_object(obj, root_rank, name, **B.ps_kwargs(process_set))


def allgather_object(obj, name=None, process_set=global_process_set):
    """The list of every rank's `obj`, in rank order."""
    return _hv.allgather_object(obj, name, **B.ps_kwargs(process_set))


def broadcast_parameters(params, root_rank=0):
    """Overwrite parameters with root_rank's, in place: a state_dict, named_parameters(), or
    parameters()."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    handles, bad = [], []
    for i, (name, p) in enumerate(items):
        if not isinstance(p, torch.Tensor):
            bad.append((i, name, p))
        elif p.numel():
            handles.append(broadcast_async_(p.data, root_rank,
                                            None if name is None else f"broadcast.{name}"))
    for h in handles:
        h.synchronize()
    if bad:     # after the tensors' broadcasts, which the other ranks wait for (Horovod fails
        i, name, p = bad[0]     # on these too, with an AttributeError)
        what = repr(name) if name is not None else f"entry {i}"
        raise ValueError(f"broadcast_parameters: {what} is a {type(p).__name__}, not a tensor: "
                         "nothing would overwrite it with root's (broadcast_object carries other "
                         "objects)")


class _Slot:
    """Where a tensor of the root's optimizer state goes: index, shape and dtype."""

    def __init__(self, index, t):
        self.index, self.shape, self.dtype = index, tuple(t.shape), t.dtype


def _split(obj, tensors):
    """`obj` with each tensor replaced by a _Slot (the tensors appended to `tensors`)."""
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return _Slot(len(tensors) - 1, obj)
    if isinstance(obj, dict):
        return {k: _split(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(_split(v, tensors) for v in obj)
    return obj


def _join(obj, tensors):
    if isinstance(obj, _Slot):
        return tensors[obj.index]
    if isinstance(obj, dict):
        return {k: _join(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(_join(v, tensors) for v in obj)
    return obj


def _slots(obj):
    if isinstance(obj, _Slot):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _slots(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _slots(v)


def _init_state(optimizer):
    """Horovod's start for a fresh optimizer: every trainable parameter gets a zero gradient
    and the wrapped optimizer steps once, locally, so that its state exists (and scripts that
    read .grad afterwards find a tensor); the parameters are restored after that step (Horovod
    keeps whatever weight decay did). LBFGS is left alone: its step needs a closure."""
    base = getattr(optimizer, "_hvd_base", type(optimizer))
    if issubclass(base, torch.optim.LBFGS):
        return
    sparse = issubclass(base, torch.optim.SparseAdam)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for p in params:
        if p.requires_grad:
            p.grad = torch.zeros_like(p).to_sparse() if sparse else torch.zeros_like(p)
    kept = [p.detach().clone() for p in params]
    base.step(optimizer)
    with torch.no_grad():   # weight decay would move them, by each rank's own lr: undo that
        for p, k in zip(params, kept):
            p.copy_(k)


def broadcast_optimizer_state(optimizer, root_rank=0, model=None):
    """Every rank gets root_rank's optimizer state and hyper-parameters (any torch.optim
    optimizer: state may hold tensors, scalars and nested containers, and may be empty on the
    other ranks). The structure travels pickled; the tensors travel as broadcasts. When root's
    state is empty every rank first initializes it as Horovod does (see _init_state)."""
    mine = _hv.rank() == root_rank
    fresh = _hv.broadcast_object(not optimizer.state_dict()["state"] if mine else None,
                                 root_rank, name="broadcast_optimizer_state.fresh")
    if fresh:
        _init_state(optimizer)
    tensors = []
    skeleton = _split(optimizer.state_dict(), tensors) if mine else None
    skeleton = _hv.broadcast_object(skeleton, root_rank, name="broadcast_optimizer_state")
    if not mine:
        slots = sorted(_slots(skeleton), key=lambda s: s.index)
        tensors = [torch.empty(s.shape, dtype=s.dtype) for s in slots]
    work = [t.detach().clone(memory_format=torch.contiguous_format) for t in tensors]
    handles = [broadcast_async_(t, root_rank, f"broadcast_optimizer_state.{i}")
               for i, t in enumerate(work) if t.numel()]
    for h in handles:
        h.synchronize()
    if not mine:
        # Horovod writes root's values into the optimizer's own groups: a scheduler, or any
        # code holding the groups (or, for a wrapped optimizer, the original object sharing
        # them), keeps seeing the optimizer's; load_state_dict makes new ones, so the loaded
        # values go back into the old list and dicts
        groups = optimizer.param_groups
        kept = list(groups)
        optimizer.load_state_dict(_join(skeleton, work))
        for old, new in zip(kept, optimizer.param_groups):
            old.update(new)
        groups[:] = kept
        optimizer.param_groups = groups
