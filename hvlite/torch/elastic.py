"""`hvd.elastic` for `import hvlite.torch as hvd`: Horovod's TorchState and ElasticSampler,
with run, State, ObjectState, HostsUpdatedInterrupt and HorovodInternalError from
hvlite.elastic.

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state): ...

A commit holds copies of model.state_dict() and optimizer.state_dict() and the keyword
attributes (an ElasticSampler's place in its epoch among them: hvlite/torch/sampler.py);
restore and sync load them back with load_state_dict(), so the model's parameters keep their
identity and the optimizer its parameter groups. On disk a tensor is its dtype, shape
and raw bytes (registered with hvlite/elastic/codec.py here), never torch's own pickle, so a
commit is read back without running code (`trusted=True` as in ObjectState for other objects).
"""
import copy

import numpy as np
import torch

from hvlite.elastic import (HorovodInternalError, HostsUpdatedInterrupt, ObjectState,  # noqa: F401
                            State, codec, run)
from hvlite.torch.sampler import ElasticSampler

_TAG = "torch.Tensor"


def _tensor_out(t):
    """A tensor as plain data: (dtype name, shape, its bytes as a NumPy uint8 array)."""
    if t.layout != torch.strided or t.is_quantized:
        kind = "quantized" if t.is_quantized else str(t.layout)
        raise codec.CommitError(f"cannot commit a {kind} tensor: only dense ones (convert it "
                                "with .to_dense() or .dequantize())")
    t = t.detach().to("cpu").contiguous()
    raw = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    return (str(t.dtype).removeprefix("torch."), list(t.shape), raw.numpy())


def _tensor_in(data):
    name, shape, raw = data
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype) or not isinstance(raw, np.ndarray) or \
            raw.dtype != np.uint8 or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ValueError(f"not a tensor record: dtype {name!r}, shape {shape!r}")
    count = 1
    for n in shape:
        count *= n                      # Python ints: no wrap
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if raw.size != count * itemsize:    # a damaged or planted record, never memory left over
        raise ValueError(f"not a tensor record: {raw.size} bytes for a {name} tensor of shape "
                         f"{list(shape)} ({count * itemsize} bytes)")
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(np.array(raw, copy=True)).view(dtype).reshape(shape)


codec.register(_TAG, torch.Tensor, _tensor_out, _tensor_in)


def _live(obj):
    """Objects restored in place through their state_dict, as Horovod's handlers do: a module,
    an optimizer or an ElasticSampler (the caller holds them; a copy put back by setattr would
    leave the caller's untouched)."""
    return isinstance(obj, (torch.nn.Module, torch.optim.Optimizer, ElasticSampler))


def _snapshot(obj):
    if isinstance(obj, torch.nn.Module):
        return {k: v.detach().clone() for k, v in obj.state_dict().items()}
    return copy.deepcopy(obj.state_dict())


def _load(obj, snap):
    obj.load_state_dict(snap if isinstance(obj, torch.nn.Module) else copy.deepcopy(snap))


class TorchState(ObjectState):
    """Horovod's TorchState(model=None, optimizer=None, **kwargs): the model, the optimizer and
    every other module or optimizer among the keyword arguments (a GAN's discriminator and its
    optimizer, say) are saved by state_dict and restored in place; other keyword arguments are
    ObjectState's attributes. `trusted=True` as in ObjectState."""

    def __init__(self, model=None, optimizer=None, *, trusted=False, **kwargs):
        for reserved in ("model", "optimizer"):
            if reserved in kwargs:
                raise TypeError(f"TorchState: {reserved!r} is the state's own argument")
        self.model, self.optimizer = model, optimizer
        self._live_names = sorted(k for k, v in kwargs.items() if _live(v))
        live = {k: kwargs.pop(k) for k in self._live_names}
        super().__init__(trusted=trusted, **kwargs)
        for k, v in live.items():
            setattr(self, k, v)

    def _capture(self):
        model = None if self.model is None else _snapshot(self.model)
        opt = None if self.optimizer is None else _snapshot(self.optimizer)
        out = {"model": model, "optimizer": opt, "objects": super()._capture()}
        if self._live_names:            # (a commit without them reads as before)
            out["live"] = {k: _snapshot(getattr(self, k)) for k in self._live_names}
        return out

    def _apply(self, payload):
        if self.model is not None and payload["model"] is not None:
            _load(self.model, payload["model"])
        if self.optimizer is not None and payload["optimizer"] is not None:
            _load(self.optimizer, payload["optimizer"])
        for k, snap in payload.get("live", {}).items():
            if k in self._live_names:
                _load(getattr(self, k), snap)
        super()._apply(payload["objects"])


__all__ = ["TorchState", "State", "ObjectState", "run", "HostsUpdatedInterrupt",
           "HorovodInternalError", "ElasticSampler"]
