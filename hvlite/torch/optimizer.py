"""DistributedOptimizer with Horovod's protocol: each gradient's allreduce starts from a hook as
soon as backward() has accumulated it; step() (or synchronize()) waits for them, then steps.
With op=Adasum on more than one rank it is Horovod's Adasum optimizer instead (_AdasumMixin):
each rank steps locally and Adasum combines the ranks' parameter updates.

The returned object is an instance of a subclass of the wrapped optimizer's class holding the
same state, so isinstance checks and torch.optim.lr_scheduler work on it as they do in Horovod.
"""
import numbers
import os
import warnings
from contextlib import contextmanager

import torch

import hvlite as _hv
from hvlite._core.trace import now as _now
from hvlite.ops import Adasum, Average
from hvlite.timeline import record_compute as _record_compute
from hvlite.torch import _bridge as B
from hvlite.torch.compression import Compression
from hvlite.torch.mpi_ops import (_grouped_allreduce_async, allreduce_async_, global_process_set,
                                  sparse_allreduce_async)


def _split_list(items, n):
    """n contiguous parts of nearly equal length (the first ones one longer)."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


class _SparseInGroup:
    """A group's handles when some of its gradients are sparse: synchronize() puts each sparse
    result back in its parameter's .grad."""

    def __init__(self, dense, sparse):
        self.dense, self.sparse = dense, sparse

    def synchronize(self):
        for h in self.dense:
            h.synchronize()
        for p, h in self.sparse.items():
            p.grad = h.synchronize()


class _DistributedMixin:
    """Methods layered over the wrapped optimizer's class (the base class next in the MRO)."""

    def _hvd_setup(self, named_parameters, compression, backward_passes_per_step, op,
                   gradient_predivide_factor, groups, sparse_as_dense, process_set):
        self._compression = compression
        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            if any(not isinstance(x, tuple) or len(x) != 2 for x in named):
                raise ValueError("named_parameters must be (name, parameter) tuples, as "
                                 "model.named_parameters() yields")
        else:
            named = [(f"allreduce.noname.{i}.{j}", p) for i, g in enumerate(self.param_groups)
                     for j, p in enumerate(g["params"])]
        names = [n for n, _ in named]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError(f"parameter names must be unique; duplicated: {', '.join(dups)}")
        unnamed = {id(p) for p in all_params} - {id(p) for _, p in named}
        if unnamed:
            raise ValueError(f"named_parameters was given but {len(unnamed)} of the optimizer's "
                             "parameters have no name in it")
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        self._parameter_names = {p: n for n, p in named}    # Horovod's name; scripts read it
        self.backward_passes_per_step = backward_passes_per_step
        self._delay = {p: backward_passes_per_step for p in all_params}
        self.op, self.gradient_predivide_factor = op, gradient_predivide_factor
        self.sparse_as_dense, self.process_set = sparse_as_dense, process_set
        self._handles, self._synchronized, self._should_synchronize = {}, False, True
        self._densified = {}        # parameter -> sparse_dim of the sparse gradient it replaced
        trainable = [p for p in all_params if p.requires_grad]
        self._requires_update = set(trainable)
        self._group_of, self._group_count = {}, {}
        if isinstance(groups, int) and groups > 0:
            groups = _split_list(trainable, groups)
        if groups:
            seen = set()
            for grp in groups:
                for p in grp:
                    if not isinstance(p, torch.Tensor):
                        raise ValueError("groups must be lists of parameters (torch.Tensor)")
                    if id(p) in seen:
                        raise ValueError("a parameter may appear in only one group")
                    seen.add(id(p))
            listed = [tuple(p for p in grp if p in self._requires_update) for grp in groups]
            listed += [(p,) for p in trainable if id(p) not in seen]
            for grp in filter(None, listed):
                self._group_count[grp] = 0
                for p in grp:
                    self._group_of[p] = grp
        self._compute_t0 = None         # when this step's compute began (for the timeline)
        self._hooks = []
        # Horovod's rule: no hooks on one rank outside an elastic job (the reductions happen in
        # synchronize()), so backward() may run more than once before step() there
        if getattr(process_set, "included", lambda: True)() and (
                _hv.size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1"
                or os.environ.get("HVLITE_ELASTIC_DIR")):
            self._hooks = [p.register_post_accumulate_grad_hook(self._make_hook())
                           for p in trainable]

    def _densify(self, p):
        """sparse_as_dense: reduce the gradient dense (in place of p.grad while in flight);
        synchronize() makes the result sparse again, as Horovod does, so that optimizers that
        take only sparse gradients (SparseAdam) still step."""
        self._densified[p] = p.grad.sparse_dim()
        p.grad = p.grad.to_dense()

    def _scales(self):
        if self.op == Average:
            f = self.gradient_predivide_factor
            return 1.0 / f, f
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        name = self._parameter_names.get(p)
        if p.grad.is_sparse:
            if not self.sparse_as_dense:
                return sparse_allreduce_async(p.grad, name, self.op, self.process_set)
            self._densify(p)
        pre, post = self._scales()
        return allreduce_async_(p.grad, name=name, op=self.op, prescale_factor=pre,
                                postscale_factor=post, process_set=self.process_set,
                                compression=self._compression)

    def _grouped_async(self, grp):
        for p in grp:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            elif p.grad.is_sparse and self.sparse_as_dense:
                self._densify(p)
        sparse = [p for p in grp if p.grad.is_sparse]
        dense = [p for p in grp if not p.grad.is_sparse]
        pre, post = self._scales()
        # each gradient cast by the compression as on the ungrouped path (Horovod compresses
        # every tensor of a group before its grouped allreduce)
        handles = [_grouped_allreduce_async([p.grad for p in dense], None,
                                            self._parameter_names.get(dense[0]), self.op, pre,
                                            post, self.process_set, True,
                                            self._compression)] if dense else []
        if not sparse:
            return handles[0]
        # sparse gradients cannot join a grouped allreduce: each is gathered on its own and
        # comes back sparse (SparseAdam refuses dense ones)
        return _SparseInGroup(handles, {p: sparse_allreduce_async(
            p.grad, self._parameter_names.get(p), self.op, self.process_set) for p in sparse})

    def _make_hook(self):
        def hook(p):
            if self._compute_t0 is None:        # the first step: compute seen from backward on
                self._compute_t0 = _now()
            if p in self._handles and self._handles[p] is not None and self._delay[p] <= 0:
                raise AssertionError(
                    "gradients were computed more than backward_passes_per_step times before "
                    "step(); raise backward_passes_per_step to accumulate them locally")
            self._delay[p] -= 1
            handle = None
            if self._delay[p] == 0:
                grp = self._group_of.get(p)
                if grp is not None and len(grp) > 1:
                    self._group_count[grp] += 1
                    if self._group_count[grp] == len(grp):
                        self._group_count[grp] = 0
                        for q in grp:
                            self._handles.pop(q, None)
                        self._handles[grp] = self._grouped_async(grp)
                        return
                else:
                    handle = self._allreduce_grad_async(p)
            self._handles[p] = handle
        return hook

    def synchronize(self):
        """Wait for every gradient's allreduce (starting those not started: parameters this
        step did not reach, or that are still accumulating) and put the results in .grad."""
        # the timeline's compute span: from the last step's end (forward and backward ran since,
        # with the gradients' all-reduces under way) to here, where waiting begins
        if self._compute_t0 is not None:
            _record_compute(self._compute_t0, _now(), "compute (forward, backward)")
            self._compute_t0 = None
        if not getattr(self.process_set, "included", lambda: True)():
            self._synchronized = True
            return
        done = set()
        for key in self._handles:
            done.update(key if isinstance(key, tuple) else (key,))
        for p in self._requires_update - done:
            self._handles[p] = None
        for key, h in list(self._handles.items()):
            if h is None:
                self._handles[key] = self._allreduce_grad_async(key)
        try:
            for key, h in self._handles.items():
                out = h.synchronize()
                if isinstance(key, torch.Tensor) and key.grad is not None and key.grad.is_sparse:
                    key.grad = out
            # sparse_as_dense: the reduced gradient goes back to the sparse layout it came in
            # (Horovod: `aggregated.to_sparse()`; rows that reduced to zero are left out)
            for p, sparse_dim in self._densified.items():
                if p.grad is not None and not p.grad.is_sparse:
                    p.grad = p.grad.to_sparse(sparse_dim)
        finally:
            self._handles.clear()
            self._densified.clear()
            for p in self._delay:
                self._delay[p] = self.backward_passes_per_step
            for g in self._group_count:
                self._group_count[g] = 0
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """For `opt.synchronize(); (clip gradients); with opt.skip_synchronize(): opt.step()`."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                # Horovod's text and category, which scripts may filter on
                warnings.warn("optimizer.step() called without "
                              "optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.", UserWarning)
            self.synchronize()
        self._synchronized = False
        try:
            return self._hvd_base.step(self, closure)
        finally:
            self._compute_t0 = _now()       # the next step's compute starts here

    def zero_grad(self, set_to_none=True):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(): the gradients' "
                                 "allreduces are still in flight")
        return self._hvd_base.zero_grad(self, set_to_none=set_to_none)

    def set_backward_passes_per_step(self, passes):
        passes = _passes(passes)
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def load_state_dict(self, state_dict):
        self._handles, self._synchronized, self._should_synchronize = {}, False, True
        self._densified = {}
        self.set_backward_passes_per_step(self.backward_passes_per_step)
        return self._hvd_base.load_state_dict(self, state_dict)


class _AdasumMixin(_DistributedMixin):
    """Horovod's DistributedOptimizer for op=Adasum (its _DistributedAdasumOptimizer): Adasum
    needs the full magnitude of what each rank would do, so as soon as a parameter's gradient is
    accumulated the wrapped optimizer steps that parameter locally, and its update (new value
    minus old) goes to an Adasum allreduce in place of the gradient. step() waits and sets each
    parameter to its old value plus the combined update; optimizer state (momentum, Adam's
    moments) stays each rank's own, as in Horovod. synchronize() does nothing and
    skip_synchronize() refuses, as in Horovod: there are no reduced gradients to look at."""

    def _adasum_async(self, p):
        start = self._starts[p] = p.detach().clone()
        stashed = [g["params"] for g in self.param_groups]
        try:                        # step this parameter alone
            for g in self.param_groups:
                g["params"] = [q for q in g["params"] if q is p]
            self._hvd_base.step(self)
        finally:
            for g, params in zip(self.param_groups, stashed):
                g["params"] = params
        p.data.sub_(start)          # the parameter holds this rank's update until step()
        wire, ctx = (self._compression or Compression.none).compress(p.data)
        return allreduce_async_(wire, name=self._parameter_names.get(p), op=Adasum,
                                process_set=self.process_set), ctx

    def _make_hook(self):
        def hook(p):
            if self._handles.get(p) is not None and self._delay[p] <= 0:
                raise AssertionError(
                    "gradients were computed more than backward_passes_per_step times before "
                    "step(); raise backward_passes_per_step to accumulate them locally")
            self._delay[p] -= 1
            self._handles[p] = self._adasum_async(p) if self._delay[p] == 0 else None
        return hook

    def synchronize(self):
        """Nothing to do: with Adasum the updates are combined in step() (Horovod's too)."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("skip_synchronize() does not apply with op=Adasum: step() combines "
                             "the ranks' updates, not their gradients (Horovod refuses it too)")
        yield  # pragma: no cover

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        if not getattr(self.process_set, "included", lambda: True)():
            self._hvd_base.step(self)
            return loss
        try:
            for p in self._trainable:       # parameters backward() did not reach, or not k times
                if self._handles.get(p) is None:
                    self._handles[p] = self._adasum_async(p)
            for p, (h, ctx) in self._handles.items():
                comp = self._compression or Compression.none
                delta = comp.decompress(h.synchronize(), ctx)
                start = self._starts.pop(p)
                start.add_(delta)
                p.data.copy_(start)
        finally:
            self._handles.clear()
            self._starts.clear()
            for p in self._delay:
                self._delay[p] = self.backward_passes_per_step
        return loss


def _passes(n):
    """backward_passes_per_step as Horovod takes it (any number above 0: 2.0 from a division,
    True), as the int it counts; a fraction would mean nothing, so it is refused."""
    if not isinstance(n, numbers.Real) or not n > 0 or n != int(n):
        raise ValueError(f"backward_passes_per_step must be a positive whole number, got {n!r}")
    return int(n)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wrap a torch.optim optimizer so that gradients are reduced across ranks (averaged by
    default) during backward(). Gradients accumulate locally for backward_passes_per_step
    passes before they are reduced (summed, not divided: scale the loss if you want a mean).
    num_groups / groups reduce gradients in groups, each one grouped allreduce.
    Sparse gradients are gathered and come back sparse; with sparse_as_dense=True they are
    reduced dense and made sparse again (their own sparse_dim) before the step, as in Horovod,
    so SparseAdam works either way.
    op=Adasum on more than one rank: Horovod's Adasum optimizer (see _AdasumMixin); groups and
    sparse_as_dense do not apply there (each parameter's update is reduced on its own and is
    dense), compression may be none, fp16 or bf16."""
    op = B.check_op(Average if op is None else op, "DistributedOptimizer")   # (Horovod's None)
    adasum = op == Adasum and B.ps_size(process_set) > 1
    if adasum and getattr(compression, "method", "none") not in ("none", "fp16", "bf16"):
        raise ValueError(f"DistributedOptimizer: op=Adasum takes Compression.none, fp16 or bf16, "
                         f"not {compression!r}")
    if num_groups:          # Horovod: deprecated for groups, which win when both are given
        warnings.warn("DistributedOptimizer: num_groups is deprecated; use groups",
                      DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
        num_groups = 0
    backward_passes_per_step = _passes(backward_passes_per_step)
    if groups is not None and not isinstance(groups, list) and not (
            isinstance(groups, numbers.Integral) and not isinstance(groups, bool) and groups > 0):
        raise ValueError(f"groups should be a positive integer or a list of lists of "
                         f"parameters, got {groups!r}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"DistributedOptimizer wraps a torch.optim.Optimizer, got "
                         f"{type(optimizer).__name__}")
    base = type(optimizer)
    mixin = _AdasumMixin if adasum else _DistributedMixin
    cls = type(base.__name__, (mixin, base), {"_hvd_base": base})
    opt = cls.__new__(cls)
    # The optimizer's state, not what was patched onto the object: an LR scheduler made before
    # the wrap puts a `step` there that calls the original's step, which would skip the
    # reduction (Horovod builds a new instance, whose methods are its class's).
    opt.__dict__.update({k: v for k, v in optimizer.__dict__.items()
                         if not (callable(v) and callable(getattr(cls, k, None)))})
    if adasum:
        opt._starts = {}
        opt._trainable = [p for g in opt.param_groups for p in g["params"] if p.requires_grad]
    opt._hvd_setup(named_parameters, compression, backward_passes_per_step, op,
                   gradient_predivide_factor, None if adasum else num_groups or groups,
                   sparse_as_dense, process_set)
    return opt
