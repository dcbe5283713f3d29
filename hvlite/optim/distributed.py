"""Data-parallel training over any Optimizer: gradients averaged across ranks, communication
overlapped with the backward pass.

    opt = DistributedOptimizer(SGD(lr), params)
    for batch in data:
        for name, grad in backward(batch):        # last layer first
            opt.grad_ready(name, grad)            # its allreduce starts now
        opt.step()                                # waits for what is still in flight, applies

Every rank must report the same names each step (any order). With backward_passes_per_step=k,
gradients are summed locally over k micro-batches and averaged across ranks once. With
process_set=, gradients are averaged over that set's ranks only; a rank outside the set steps on
its own gradients, without communication (as in Horovod).
With compression=Compression.<method> (hvlite.compression) each gradient goes through that
compressor, which keeps its error-feedback state under the gradient's name.

With op=Adasum it follows Horovod's Adasum optimizer: as soon as a gradient is in, the wrapped
optimizer steps that parameter on this rank alone (on a copy), and Adasum combines the ranks'
updates (new value minus old) instead of their gradients; step() adds the combined update.
Optimizer state (momentum, moments) stays each rank's own. Horovod's guide suggests a learning
rate about 2-2.5 times the single-rank one rather than N times (docs/training.md).
"""
import numpy as np

from hvlite import collectives, runtime, timeline
from hvlite.ops import Adasum, Average, as_op
from hvlite.process_sets import global_process_set, state_of


class DistributedOptimizer:
    def __init__(self, optimizer, params, op=Average, backward_passes_per_step=1,
                 compression=None, prefix="grad.", process_set=global_process_set):
        if backward_passes_per_step < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
        self.process_set = process_set
        self._member = True
        if process_set is not None and process_set is not global_process_set:
            # an unregistered or removed set fails here, with the reason
            self._member = state_of(runtime.current(), process_set, "DistributedOptimizer",
                                    outsider_ok=True) is not None
        self.optimizer, self.params = optimizer, params
        self.op, self.k, self.prefix = op, backward_passes_per_step, prefix
        if compression is not None and not callable(getattr(compression, "allreduce_async", None)):
            raise TypeError(f"compression must be an hvlite.compression compressor (e.g. "
                            f"Compression.fp16), got {compression!r}")
        self.compression = compression
        self._adasum = as_op(op) == Adasum
        if self._adasum and compression is not None:
            raise ValueError("op=Adasum combines exact updates; it takes no compression=")
        self._acc = {}             # name -> locally summed gradient
        self._count = {}           # name -> micro-batches accumulated
        self._handles = {}         # name -> in-flight allreduce
        self._rejected = set()     # names whose gradient had the wrong shape this step
        self._passes = 0

    def grad_ready(self, name, grad):
        """Hand in one parameter's gradient as soon as it exists; on the k-th micro-batch its
        allreduce starts at once, overlapping the rest of the backward pass."""
        if name not in self.params:
            raise KeyError(f"grad_ready: {name!r} is not one of the optimizer's parameters")
        if name in self._handles:
            raise ValueError(f"grad_ready: {name!r} already reported this step")
        g = np.asarray(grad)
        if g.shape != self.params[name].shape:
            # Still submit it: the other ranks' gradients of this name then fail too (the
            # coordinator names every rank's shape) instead of waiting for this one.
            self._handles[name] = self._launch(name, g.astype(self.params[name].dtype))
            self._rejected.add(name)
            raise ValueError(f"grad_ready: {name!r} has shape {g.shape}, parameter has "
                             f"{self.params[name].shape}")
        acc = self._acc.get(name)
        self._acc[name] = g.astype(self.params[name].dtype, copy=True) if acc is None else acc + g
        self._count[name] = self._count.get(name, 0) + 1
        if self._count[name] == self.k:
            total = self._acc.pop(name)
            del self._count[name]
            if self.k > 1:
                total /= self.k
            if self._adasum:
                total = self._local_update(name, total)
            self._handles[name] = self._launch(name, total)

    def _local_update(self, name, grad):
        """This rank's update of one parameter, from its own gradient (op=Adasum): the wrapped
        optimizer steps a copy, and the difference is what the ranks combine."""
        p = self.params[name]
        moved = p.copy()
        self.optimizer.update(name, moved, grad)
        moved -= p
        return moved

    def _launch(self, name, grad):
        if not self._member:
            return _Local(grad)
        ps = self.process_set
        extra = {} if ps is None or ps is global_process_set else {"process_set": ps}
        if self.compression is not None:
            return self.compression.allreduce_async(grad, name=self.prefix + name, op=self.op,
                                                    **extra)
        return collectives.allreduce_async_(grad, op=self.op, name=self.prefix + name, **extra)

    def synchronize(self):
        """Wait for every gradient in flight; returns {name: averaged gradient}."""
        out = {name: h.synchronize() for name, h in sorted(self._handles.items())}
        self._handles.clear()
        return out

    def step(self):
        """Apply one update once every rank's k micro-batches are in; returns True when an
        update happened (False on the first k-1 micro-batches of an accumulation)."""
        self._passes += 1
        if self._passes % self.k:
            if self._handles:
                raise RuntimeError("step(): gradients were launched before the accumulation ended")
            return False
        grads = self.synchronize()
        if self._rejected:
            bad, self._rejected = sorted(self._rejected), set()
            raise ValueError(f"step(): no update, the gradients of {bad} had the wrong shape")
        missing = sorted(set(self._acc) | set(self._count))
        if missing:
            raise RuntimeError(f"step(): gradients of {missing} were reported fewer than "
                               f"{self.k} times this step")
        with timeline.span("optimizer.update"):     # the update itself, not the wait before it
            if self._adasum:                        # the combined updates, already stepped
                self.optimizer.steps += 1
                for name in sorted(grads):
                    self.params[name] += grads[name]
            else:
                self.optimizer.step(self.params, grads)
        return True

    @property
    def lr(self):
        return self.optimizer.lr

    @lr.setter
    def lr(self, value):
        self.optimizer.lr = value


class _Local:
    """A rank outside the optimizer's process set: its own gradient, no communication."""

    def __init__(self, grad):
        self.grad = grad

    def synchronize(self):
        return self.grad


class LocalSGD:
    """Local SGD: every rank steps on its own gradients, and every `every` steps the parameters
    (not the gradients) are averaged across ranks -- fewer, larger exchanges."""

    def __init__(self, optimizer, params, every=4):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.optimizer, self.params, self.every, self.steps = optimizer, params, every, 0

    def step(self, grads):
        self.optimizer.step(self.params, grads)
        self.steps += 1
        if self.steps % self.every == 0:
            self.average()

    def average(self):
        names = sorted(self.params)
        hs = [collectives.allreduce_async_(self.params[n], op=Average, name=f"localsgd.{n}")
              for n in names]
        for h in hs:
            h.synchronize()


def broadcast_parameters(params, root_rank=0):
    """Overwrite every rank's parameters with root_rank's (in place), e.g. after random init."""
    hs = [collectives.broadcast_async_(params[n], root_rank, name=f"bcast.param.{n}")
          for n in sorted(params)]
    for h in hs:
        h.synchronize()


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Give every rank root_rank's optimizer state (learning rate, step count, moments)."""
    state = collectives.broadcast_object(optimizer.state_dict(), root_rank, name="bcast.optimizer_state")
    optimizer.load_state_dict(state)


__all__ = ["DistributedOptimizer", "LocalSGD", "broadcast_parameters", "broadcast_optimizer_state"]
