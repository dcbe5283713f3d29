"""hvlite for PyTorch, in Horovod's spelling: `import hvlite.torch as hvd`.

CPU tensors go to the collectives as NumPy views of their memory (no copies where the tensor is
contiguous). DistributedOptimizer starts each parameter's gradient all-reduce from a hook that
fires when its gradient has been accumulated, so communication overlaps the rest of backward().
"""
import numpy as np
import torch

import hvlite as _hv
from hvlite import (Average, Max, Min, Product, Sum, allgather_object, barrier,  # noqa: F401
                    broadcast_object, cross_rank, cross_size, init, is_initialized, join,
                    local_rank, local_size, mpi_threads_supported, poll, rank, shutdown, size,
                    start_timeline, stop_timeline)


def _view(t):
    """A NumPy view of a CPU tensor's memory (bfloat16 through ml_dtypes)."""
    if t.device.type != "cpu":
        raise _hv.InvalidArgumentError(f"hvlite.torch: tensor on {t.device}; this build handles CPU tensors")
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


class _TorchHandle:
    """An hvlite handle whose result is a tensor: `out`, or `convert` applied to the result."""

    def __init__(self, handle, out=None, convert=None):
        self.handle, self.out, self.convert = handle, out, convert

    def poll(self):
        return self.handle.poll()

    def synchronize(self):
        result = self.handle.synchronize()
        return self.convert(result) if self.convert else self.out


def allreduce_async_(tensor, op=Average, name=None):
    return _TorchHandle(_hv.allreduce_async_(_view(tensor.detach()), op=op, name=name), tensor)


def allreduce_async(tensor, op=Average, name=None):
    out = tensor.detach().clone().contiguous()
    return allreduce_async_(out, op=op, name=name)


def allreduce(tensor, op=Average, name=None):
    return allreduce_async(tensor, op, name).synchronize()


def allreduce_(tensor, op=Average, name=None):
    return allreduce_async_(tensor, op, name).synchronize()


def allgather_async(tensor, name=None):
    bf16 = tensor.dtype == torch.bfloat16
    convert = (lambda a: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)) if bf16 else torch.from_numpy
    return _TorchHandle(_hv.allgather_async(_view(tensor.detach().contiguous()), name=name), convert=convert)


def allgather(tensor, name=None):
    return allgather_async(tensor, name).synchronize()


def broadcast_async_(tensor, root_rank, name=None):
    return _TorchHandle(_hv.broadcast_async_(_view(tensor.detach()), root_rank, name=name), tensor)


def broadcast_async(tensor, root_rank, name=None):
    return broadcast_async_(tensor.detach().clone().contiguous(), root_rank, name)


def broadcast_(tensor, root_rank, name=None):
    return broadcast_async_(tensor, root_rank, name).synchronize()


def broadcast(tensor, root_rank, name=None):
    return broadcast_async(tensor, root_rank, name).synchronize()


def synchronize(handle):
    return handle.synchronize()


def broadcast_parameters(params, root_rank=0):
    """A state_dict, or an iterable of (name, tensor): every rank gets root_rank's values."""
    items = sorted(params.items()) if isinstance(params, dict) else sorted(params, key=lambda kv: kv[0])
    handles = [_hv.broadcast_async_(_view(t.detach()), root_rank, name=f"bcast.{n}")
               for n, t in items if torch.is_tensor(t) and t.numel()]
    for h in handles:
        h.synchronize()


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Every rank gets root_rank's optimizer state (any torch.optim optimizer)."""
    state = broadcast_object(optimizer.state_dict(), root_rank, name="bcast.optimizer")
    optimizer.load_state_dict(state)


class DistributedOptimizer:
    """Wraps a torch.optim optimizer: gradients are averaged across ranks as backward() produces
    them; step() waits for the last ones and steps."""

    def __init__(self, optimizer, named_parameters=None, op=Average, backward_passes_per_step=1):
        self.optimizer, self.op, self.k = optimizer, op, backward_passes_per_step
        params = list(named_parameters) if named_parameters is not None else [
            (f"param.{i}.{j}", p) for i, g in enumerate(optimizer.param_groups) for j, p in enumerate(g["params"])]
        names = [n for n, _ in params]
        if len(set(names)) != len(names):
            raise ValueError("DistributedOptimizer: parameter names must be unique")
        self._handles, self._passes = {}, {}
        for name, p in params:
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._hook(name))

    def _hook(self, name):
        def hook(p):
            self._passes[name] = self._passes.get(name, 0) + 1
            if self._passes[name] % self.k == 0:
                if self.k > 1:
                    p.grad.div_(self.k)
                self._handles[name] = _hv.allreduce_async_(_view(p.grad), op=self.op, name=f"grad.{name}")
        return hook

    def synchronize(self):
        for h in self._handles.values():
            h.synchronize()
        self._handles.clear()

    def step(self, closure=None):
        self.synchronize()
        return self.optimizer.step(closure)

    def zero_grad(self, set_to_none=True):
        return self.optimizer.zero_grad(set_to_none=set_to_none)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, sd):
        return self.optimizer.load_state_dict(sd)
