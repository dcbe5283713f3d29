"""Rank side: hvlite.torch with process sets and compression, after init(process_sets=...)."""
import numpy as np
import pytest
import torch

import hvlite.torch as hvd

hvd.init(process_sets="dynamic")
N, RANK = hvd.size(), hvd.rank()
from helpers import adasum_reference, assert_everywhere, expect_raise_everywhere  # noqa: E402
from hvlite.errors import HvliteError  # noqa: E402


def test_allreduce_and_optimizer_on_a_subset():
    members = list(range(1, N))          # rank 0 stays outside
    ps = hvd.add_process_set(members)
    failures = []
    x = torch.arange(6, dtype=torch.float32) * (RANK + 1)
    if ps.included():
        got = hvd.allreduce(x, op=hvd.Sum, process_set=ps, name="sub")
        want = torch.arange(6, dtype=torch.float32) * sum(r + 1 for r in members)
        if not torch.equal(got, want):
            failures.append(f"rank {RANK}: subset sum {got} != {want}")
        hvd.allreduce_(x, process_set=ps, name="sub.inplace")
        if not torch.allclose(x, want / len(members)):
            failures.append(f"rank {RANK}: subset in-place average {x}")
        model = torch.nn.Linear(3, 1, bias=False)
        with torch.no_grad():
            model.weight.fill_(1.0)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                       named_parameters=model.named_parameters(), process_set=ps)
        loss = model(torch.full((1, 3), float(RANK + 1))).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        want_w = 1.0 - np.mean([r + 1 for r in members])
        if not torch.allclose(model.weight, torch.full((1, 3), want_w)):
            failures.append(f"rank {RANK}: subset optimizer step gave {model.weight}")
    else:
        try:
            hvd.allreduce(x, process_set=ps, name="outsider")
            failures.append(f"rank {RANK}: an outsider's allreduce on the set did not raise")
        except ValueError as e:
            if "not part of process set" not in str(e):
                failures.append(f"rank {RANK}: unclear error {e}")
    assert_everywhere(failures)
    hvd.remove_process_set(ps)


def test_adasum_on_a_subset():
    """Adasum over a process set's ranks, in allreduce and DistributedOptimizer; a rank outside
    the set steps on its own."""
    members = list(range(1, N))          # rank 0 stays outside
    ps = hvd.add_process_set(members)
    failures = []
    vec = [np.cos(np.arange(5.0) * (r + 1)) + r for r in range(N)]
    model = torch.nn.Linear(3, 1, bias=False).double()
    with torch.no_grad():
        model.weight.fill_(1.0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   process_set=ps)
    x = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64) * (RANK + 1) + RANK
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    update = [-0.5 * (np.array([1.0, -2.0, 0.5]) * (r + 1) + r) for r in range(N)]
    want_w = 1.0 + (adasum_reference([update[r] for r in members]) if ps.included()
                    else update[RANK])
    if not np.allclose(model.weight.detach().numpy().ravel(), want_w, rtol=1e-12, atol=1e-12):
        failures.append(f"rank {RANK}: Adasum optimizer step gave {model.weight}, want {want_w}")
    if ps.included():
        got = hvd.allreduce(torch.from_numpy(vec[RANK]), op=hvd.Adasum, process_set=ps,
                            name="sub.adasum")
        want = adasum_reference([vec[r] for r in members])
        if not np.allclose(got.numpy(), want, rtol=1e-12, atol=1e-12):
            failures.append(f"rank {RANK}: subset Adasum {got} != {want}")
    assert_everywhere(failures)
    hvd.remove_process_set(ps)


def test_compression_fp16_through_torch():
    x = torch.full((10,), 0.5 * (RANK + 1))
    got = hvd.allreduce(x, compression=hvd.Compression.fp16, name="c16")
    want = torch.full((10,), 0.5 * np.mean([r + 1 for r in range(N)]))
    assert_everywhere([] if torch.allclose(got, want, atol=1e-3) and got.dtype == torch.float32
                      else [f"rank {RANK}: fp16 compression gave {got}"])


def test_a_compressor_of_horovods_protocol_only():
    """A user's compressor (Horovod's Compressor: static compress/decompress, no exchange of its
    own) runs around a plain reduction in allreduce, allreduce_, grouped_allreduce and
    DistributedOptimizer, as in Horovod. Halving and doubling are exact: the results equal the
    uncompressed ones bit for bit, and the compressor was called."""
    from hvlite.torch.compression import Compressor, FP16Compressor, NoneCompressor

    class Halves(Compressor):
        calls = 0

        @staticmethod
        def compress(tensor):
            Halves.calls += 1
            return tensor * 0.5, 2.0

        @staticmethod
        def decompress(tensor, ctx):
            return tensor * ctx

    failures = []
    x = torch.arange(10, dtype=torch.float32) * (RANK + 1)
    want = hvd.allreduce(x, name="halves.plain")
    for i, comp in enumerate((Halves, NoneCompressor, FP16Compressor)):
        got = hvd.allreduce(x, compression=comp, name=f"halves.{i}")
        y = x.clone()
        hvd.allreduce_(y, compression=comp, name=f"halves.{i}.inplace")
        g = hvd.grouped_allreduce([x, 2 * x], compression=comp, name=f"halves.{i}.group")
        if not (torch.equal(got, want) and torch.equal(y, want) and torch.equal(g[0], want)
                and torch.equal(g[1], 2 * want)):
            failures.append(f"{comp.__name__}: {got[:3]}, {y[:3]}, {g[0][:3]} against {want[:3]}")
    model = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    calls = Halves.calls
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(), compression=Halves)
    model(torch.full((1, 3), float(RANK + 1))).sum().backward()
    opt.step()
    want_w = torch.full((1, 3), 1.0 - np.mean([r + 1 for r in range(N)]))
    if not torch.equal(model.weight.detach(), want_w) or Halves.calls != calls + 1:
        failures.append(f"optimizer: {model.weight.detach()}, {Halves.calls - calls} call(s)")
    if Halves.calls < 4:
        failures.append(f"the compressor ran {Halves.calls} time(s)")
    assert_everywhere(failures)


def test_compression_on_a_subset():
    """hvd.allreduce and DistributedOptimizer with compression= on a process set (as Horovod
    takes them): the members' mean, over the set's size. The values are exact in float16, so
    the compressed results equal the plain ones bit for bit."""
    members = list(range(1, N)) if N > 1 else [0]
    ps = hvd.add_process_set(members)
    failures = []
    if ps.included():
        x = torch.full((10,), 0.5 * (RANK + 1))
        got = hvd.allreduce(x, compression=hvd.Compression.fp16, name="c16.sub", process_set=ps)
        want = torch.full((10,), 0.5 * np.mean([r + 1 for r in members]))
        if not (torch.equal(got, want) and got.dtype == torch.float32):
            failures.append(f"rank {RANK}: subset fp16 allreduce gave {got[:3]}")
        weights = []
        for comp in (hvd.Compression.fp16, hvd.Compression.none):
            model = torch.nn.Linear(3, 1, bias=False)
            with torch.no_grad():
                model.weight.fill_(1.0)
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                           named_parameters=model.named_parameters(),
                                           compression=comp, process_set=ps)
            model(torch.full((1, 3), float(RANK + 1))).sum().backward()
            opt.step()
            weights.append(model.weight.detach().clone())
        want_w = torch.full((1, 3), 1.0 - np.mean([r + 1 for r in members]))
        if not (torch.equal(weights[0], want_w) and torch.equal(weights[1], want_w)):
            failures.append(f"rank {RANK}: subset optimizer fp16 {weights[0]}, plain {weights[1]}")
    assert_everywhere(failures)
    hvd.remove_process_set(ps)


def test_a_bad_tensor_on_a_set_poisons_that_set_only():
    """Rank 0 passes a non-tensor on a set: the set's members fail, naming the problem, and a
    global collective under the same name, in flight meanwhile, is untouched."""
    members = [0, 1] if N > 2 else [0]
    ps = hvd.add_process_set(members)
    x = torch.ones(5) * (RANK + 1)
    glob = hvd.allreduce_async(x, op=hvd.Sum, name="same")
    failures = []
    if RANK in members:
        try:
            hvd.allreduce(x if RANK else [1.0] * 5, op=hvd.Sum, name="same", process_set=ps)
            failures.append("the set's all-reduce did not fail")
        except HvliteError as e:
            if "expected a torch.Tensor" not in str(e):
                failures.append(f"unclear error: {e}")
    got = hvd.synchronize(glob)
    want = torch.ones(5) * sum(r + 1 for r in range(N))
    if not torch.equal(got, want):
        failures.append(f"global 'same' gave {got}")
    assert_everywhere(failures)
    hvd.remove_process_set(ps)
