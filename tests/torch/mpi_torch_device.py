"""Rank side of tests/torch/test_torch.py::test_cuda_tensors_on_a_stand_in: hvlite.torch's CUDA
route on a CPU. Tensors are marked "on the device" (hvlite.torch._bridge.on_device) and a
host-backed stand-in array family (tests/gpu/host_backend.py) runs the device path, so the
torch side of CUDA tensors (operands, dtype views, results as tensors, errors on every rank,
compression by casts, DistributedOptimizer) runs without a GPU."""
import sys

import torch

import hvlite.torch as hvd
from torch_standin import route, start

r, n, be = start(hvd)
fails = []


def device(on):
    """Route every tensor the device way (on=True) or back to the host path."""
    route(be, "all" if on else None)


def same(what, got, want, exact=True):
    ok = isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype \
        and (torch.equal(got, want) if exact else torch.allclose(got, want, rtol=1e-3))
    if not ok:
        fails.append(what)
        print(f"rank {r}: {what}: got {got!r}, want {want!r}", flush=True)


def refused(what, call, words):
    try:
        call()
        fails.append(f"{what}: no error")
    except (TypeError, ValueError, RuntimeError) as e:      # Horovod raises these kinds
        if not any(w in str(e) for w in words):
            fails.append(f"{what}: {type(e).__name__}: {e}")


def t(k=0, rows=4, dtype=torch.float32):
    return (torch.arange(rows * 3, dtype=torch.float64).view(rows, 3) + 10 * (r + k)).to(dtype)


def everyone(k=0, rows=4, dtype=torch.float32):
    return [(torch.arange(rows * 3, dtype=torch.float64).view(rows, 3) + 10 * (q + k)).to(dtype)
            for q in range(n)]


device(True)
x = t()
same("allreduce Sum", hvd.allreduce(x, op=hvd.Sum, name="s"), sum(everyone()))
same("input kept", x, t())
same("allreduce Average, scaled", hvd.allreduce(t(), name="a", prescale_factor=0.5,
                                                postscale_factor=4.0),
     sum(everyone()) / n * 2, exact=False)
y = t()
if hvd.allreduce_(y, op=hvd.Sum, name="ip") is not y:
    fails.append("allreduce_ returns its tensor")
same("allreduce_ in place", y, sum(everyone()))
same("bool Max", hvd.allreduce(torch.tensor([r == 1, False, True]), op=hvd.Max, name="b"),
     torch.tensor([n > 1, False, True]))
refused("bfloat16 reduced on the device",
        lambda: hvd.allreduce(t(dtype=torch.bfloat16), name="bf"), ["bfloat16", "rank(s) ["])
same("bfloat16 allgather", hvd.allgather(t(dtype=torch.bfloat16), name="bfg"),
     torch.cat(everyone(dtype=torch.bfloat16)))
same("allgather, rows by rank", hvd.allgather(t(rows=r + 1), name="g"),
     torch.cat([e[:q + 1] for q, e in enumerate(everyone(rows=n + 1))]))
same("broadcast", hvd.broadcast(t(), root_rank=n - 1, name="bc"), everyone()[n - 1])
z = t()
hvd.broadcast_(z, root_rank=0, name="bc_")
same("broadcast_", z, everyone()[0])
refused("broadcast_ of a non-contiguous tensor",
        lambda: hvd.broadcast_(t(rows=6)[::2], root_rank=0, name="nc"), ["contiguous"])
out, got = hvd.alltoall(t(rows=n), splits=torch.ones(n, dtype=torch.int64), name="a2a")
same("alltoall rows", out, torch.stack([e[r] for e in everyone(rows=n)]))
same("alltoall received splits, as the splits given (Horovod: splits.new())", got,
     torch.ones(n, dtype=torch.int64))
same("reducescatter", hvd.reducescatter(t(rows=2 * n), op=hvd.Sum, name="rs"),
     sum(everyone(rows=2 * n))[2 * r:2 * r + 2])
same("grouped_allreduce", hvd.grouped_allreduce([t(), t(1, rows=1)], op=hvd.Sum, name="gr")[1],
     sum(everyone(1, rows=1)))
same("fp16 compression (cast by torch)", hvd.allreduce(t(), op=hvd.Sum, name="f16",
                                                      compression=hvd.Compression.fp16),
     sum(everyone()), exact=False)
refused("top-k compression on the device",
        lambda: hvd.allreduce(t(), name="topk", compression=hvd.Compression.topk),
        ["CPU tensors", "rank(s) ["])
if be.wrapped < 13:          # every call above that was not refused
    fails.append(f"the device path ran only {be.wrapped} times")


def train(on):
    """Three SGD steps of a small model through DistributedOptimizer; its parameters."""
    device(on)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(r)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 6, generator=g)).pow(2).sum().backward()
        opt.step()
    device(False)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


before = be.wrapped
on_device, on_host = train(True), train(False)
if be.wrapped - before < 6:
    fails.append("DistributedOptimizer's gradients did not take the device path")
same("DistributedOptimizer: device route = host route", on_device, on_host)
mine = on_device.numpy().tobytes()
if len(set(hvd.allgather_object(mine, name="params"))) != 1:
    fails.append("parameters differ between ranks")
print(f"rank {r}: {'FAIL ' + ', '.join(fails) if fails else 'device ok'}", flush=True)
hvd.shutdown()
sys.exit(1 if fails else 0)
