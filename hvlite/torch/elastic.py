"""`hvd.elastic` for `import hvlite.torch as hvd`: Horovod's TorchState, with run, State,
ObjectState, HostsUpdatedInterrupt and HorovodInternalError from hvlite.elastic.

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state): ...

A commit holds copies of model.state_dict() and optimizer.state_dict() (CPU tensors, pickled)
and the keyword attributes; restore and sync load them back with load_state_dict(), so the
model's parameters keep their identity and the optimizer its parameter groups.
"""
import copy

from hvlite.elastic import (HorovodInternalError, HostsUpdatedInterrupt, ObjectState,  # noqa: F401
                            State, run)


class TorchState(ObjectState):
    """Horovod's TorchState(model=None, optimizer=None, **kwargs)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        for reserved in ("model", "optimizer"):
            if reserved in kwargs:
                raise TypeError(f"TorchState: {reserved!r} is the state's own argument")
        self.model, self.optimizer = model, optimizer
        super().__init__(**kwargs)

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
