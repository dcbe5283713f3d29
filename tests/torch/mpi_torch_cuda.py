"""Rank side of tests/gpu/test_cuda.py::test_torch_cuda_tensors: hvlite.torch on CUDA tensors on
a real GPU (2 ranks may share one). Results on the tensor's device, equal to the CPU path's;
input produced on a side stream is waited for; a CPU/GPU mix fails on every rank (Horovod's
test_horovod_allreduce_cpu_gpu_error); SyncBatchNorm and Adasum on the GPU equal the CPU's;
DistributedOptimizer trains a model on the GPU."""
import sys

import torch

import hvlite.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
dev = torch.device("cuda", torch.cuda.current_device())
fails = []


def same(what, got, want, exact=True):
    ok = isinstance(got, torch.Tensor) and got.device == want.device and \
        got.shape == want.shape and got.dtype == want.dtype and (
            torch.equal(got, want) if exact else torch.allclose(got, want, rtol=1e-3))
    if not ok:
        fails.append(what)
        print(f"rank {r}: {what}: got {got!r}, want {want!r}", flush=True)


def t(k=0, rows=1000, dtype=torch.float32, on=dev):
    return (torch.arange(rows * 3, dtype=torch.float64, device=on).view(rows, 3) % 97
            + 10 * (r + k)).to(dtype)


def everyone(k=0, rows=1000, dtype=torch.float32):
    return [(torch.arange(rows * 3, dtype=torch.float64, device=dev).view(rows, 3) % 97
             + 10 * (q + k)).to(dtype) for q in range(n)]


for dtype in (torch.float32, torch.float16, torch.float64, torch.int32, torch.int64):
    same(f"allreduce Sum {dtype}", hvd.allreduce(t(dtype=dtype), op=hvd.Sum, name=f"s.{dtype}"),
         sum(everyone(dtype=dtype)))
same("allreduce Average", hvd.allreduce(t(), name="avg"), sum(everyone()) / n, exact=False)
side = torch.cuda.Stream()
with torch.cuda.stream(side):                 # produced and reduced on the caller's own stream
    x = t(rows=1 << 18) * 1.0
    y = hvd.allreduce(x, op=hvd.Sum, name="side")
    z = y * 1.0
side.synchronize()
same("input from a side stream", z, sum(everyone(rows=1 << 18)))
w = t()
hvd.allreduce_(w, op=hvd.Sum, name="ip")
same("allreduce_", w, sum(everyone()))
same("bool Max", hvd.allreduce(torch.tensor([r == 1, False], device=dev), op=hvd.Max, name="b"),
     torch.tensor([n > 1, False], device=dev))
same("allgather", hvd.allgather(t(rows=r + 1), name="g"),
     torch.cat([e[:q + 1] for q, e in enumerate(everyone(rows=n + 1))]))
same("broadcast", hvd.broadcast(t(), root_rank=n - 1, name="bc"), everyone()[n - 1])
out, got = hvd.alltoall(t(rows=n), splits=torch.ones(n, dtype=torch.int64), name="a2a")
same("alltoall", out, torch.stack([e[r] for e in everyone(rows=n)]))
same("reducescatter", hvd.reducescatter(t(rows=2 * n), op=hvd.Sum, name="rs"),
     sum(everyone(rows=2 * n))[2 * r:2 * r + 2])
same("fp16 compression", hvd.allreduce(t(), op=hvd.Sum, name="f16",
                                       compression=hvd.Compression.fp16),
     sum(everyone()), exact=False)
try:                                          # Horovod: a CPU/GPU mix is a RuntimeError
    hvd.allreduce(t(on=dev if r % 2 == 0 else "cpu"), name="mix")
    if n > 1:
        fails.append("a CPU/GPU mix ran")
except RuntimeError:
    pass

# what Horovod's test_torch.py asks of CUDA tensors (tests/torch/mpi_torch_device_rules.py has
# the same on the CPU stand-in): SyncBatchNorm, Adasum, reducescatter's Adasum refusal
bn_in = torch.randn(6, 3, 5, generator=torch.Generator().manual_seed(r))
bn_gpu = hvd.SyncBatchNorm(3).to(dev)(bn_in.to(dev))
same("SyncBatchNorm on the GPU", bn_gpu.cpu(), hvd.SyncBatchNorm(3)(bn_in), exact=False)
ada = t(dtype=torch.float64)
same("Adasum of a CUDA tensor", hvd.allreduce(ada, op=hvd.Adasum, name="ada").cpu(),
     hvd.allreduce(ada.cpu(), op=hvd.Adasum, name="ada_cpu"))
try:
    hvd.reducescatter(t(rows=2 * n), op=hvd.Adasum, name="rs_ada")
    fails.append("reducescatter with Adasum ran")
except NotImplementedError:
    pass


def train(on):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).to(on)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(r)
    for _ in range(5):
        opt.zero_grad()
        model(torch.randn(8, 32, generator=g).to(on)).pow(2).sum().backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()


on_gpu, on_cpu = train(dev), train(torch.device("cpu"))
if not torch.allclose(on_gpu, on_cpu, rtol=1e-4, atol=1e-5):
    fails.append("DistributedOptimizer on the GPU differs from the CPU run")
if len(set(hvd.allgather_object(on_gpu.numpy().tobytes(), name="params"))) != 1:
    fails.append("parameters differ between ranks")
print(f"rank {r}: {'FAIL ' + ', '.join(fails) if fails else 'torch cuda ok'}", flush=True)
hvd.shutdown()
sys.exit(1 if fails else 0)
