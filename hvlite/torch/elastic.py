"""`hvd.elastic` for `import hvlite.torch as hvd`: Horovod's TorchState, with run, State,
ObjectState, HostsUpdatedInterrupt and HorovodInternalError from hvlite.elastic.

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state): ...

A commit holds copies of model.state_dict() and optimizer.state_dict() and the keyword
attributes; restore and sync load them back with load_state_dict(), so the model's parameters
keep their identity and the optimizer its parameter groups. On disk a tensor is its dtype, shape
and raw bytes (registered with hvlite/elastic/codec.py here), never torch's own pickle, so a
commit is read back without running code (`trusted=True` as in ObjectState for other objects).
"""
import copy

import numpy as np
import torch

from hvlite.elastic import (HorovodInternalError, HostsUpdatedInterrupt, ObjectState,  # noqa: F401
                            State, codec, run)

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


class TorchState(ObjectState):
    """Horovod's TorchState(model=None, optimizer=None, **kwargs); `trusted=True` as in
    ObjectState."""

    def __init__(self, model=None, optimizer=None, *, trusted=False, **kwargs):
        for reserved in ("model", "optimizer"):
            if reserved in kwargs:
                raise TypeError(f"TorchState: {reserved!r} is the state's own argument")
        self.model, self.optimizer = model, optimizer
        super().__init__(trusted=trusted, **kwargs)

    def _capture(self):
        model = None if self.model is None else {
            k: v.detach().clone() for k, v in self.model.state_dict().items()}
        opt = None if self.optimizer is None else copy.deepcopy(self.optimizer.state_dict())
        return {"model": model, "optimizer": opt, "objects": super()._capture()}

    def _apply(self, payload):
        if self.model is not None and payload["model"] is not None:
            self.model.load_state_dict(payload["model"])
        if self.optimizer is not None and payload["optimizer"] is not None:
            self.optimizer.load_state_dict(copy.deepcopy(payload["optimizer"]))
        super()._apply(payload["objects"])


__all__ = ["TorchState", "State", "ObjectState", "run", "HostsUpdatedInterrupt",
           "HorovodInternalError"]
