"""Rank side of tests/torch/test_torch.py::test_horovods_gpu_rules_on_a_stand_in: what Horovod's
own test_torch.py asks of CUDA tensors, on the CPU stand-in (tests/torch/torch_standin.py).
Every tensor takes the device route, except in the
group check, where only tensors marked `t.gpu` do, so that a group can mix both. Each rule here failed in Horovod's suite on a GPU before it was kept:
- join: device all-reduces run while a rank has joined (it contributes zeros), a device
  broadcast then fails, and afterwards the ranks' device orders agree again;
- a float16 GPU tensor is scaled by the factor rounded to float16 (Horovod's GPU kernel);
- Adasum takes GPU tensors (here: on a host copy), bit for bit the host route's result, and
  reducescatter refuses it with NotImplementedError, as on the host;
- a group of CPU and GPU tensors is a RuntimeError on every rank, and the job goes on;
- alltoall's received splits come back in the splits tensor's dtype and device."""
import sys

import torch

import hvlite.torch as hvd
from torch_standin import route, start

r, n, be = start(hvd)
fails = []


def device(mode):
    route(be, mode)


def gpu(x):
    x.gpu = True
    return x


def check(what, ok, detail=""):
    if not ok:
        fails.append(what)
        print(f"rank {r}: {what} {detail}", flush=True)


def raises(what, call, kinds=(RuntimeError,)):
    try:
        call()
    except kinds:
        return
    except Exception as e:      # noqa: BLE001
        check(what, False, f"{type(e).__name__}: {e}")
        return
    check(what, False, "no error")


def t(seed, shape=(5, 3), dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-100, 100, shape, generator=g).to(dtype)


device("all")
# ---- join: device all-reduces run with a joined rank; a broadcast fails; orders agree after
for first in range(n):
    for caching in (False, True):
        a, b = gpu(t(1)), gpu(t(2, (17,)))
        if caching:         # the same names before the join: cached responses
            hvd.synchronize(hvd.allreduce_async(a, name="ja", op=hvd.Average))
            hvd.synchronize(hvd.allreduce_async(b, name="jb", op=hvd.Average))
        if r == first:
            last = hvd.join(0)
        else:
            ha = hvd.allreduce_async(a, name="ja", op=hvd.Average)
            hb = hvd.allreduce_async(b, name="jb", op=hvd.Average)
            got_a, got_b = hvd.synchronize(ha), hvd.synchronize(hb)
            check(f"join {first}: device allreduce with a joined rank",
                  torch.equal(got_a, a * (n - 1) / n) and torch.equal(got_b, b * (n - 1) / n),
                  f"{got_a.reshape(-1)[:4]} against {(a * (n - 1) / n).reshape(-1)[:4]}")
            if n > 1:
                raises(f"join {first}: device broadcast with a joined rank",
                       lambda: hvd.broadcast(gpu(t(3)), 0, name="jbc"))
            last = hvd.join(0)
        check(f"join {first}: the last to join", last != first or n == 1, str(last))
        check(f"join {first}: same answer everywhere",
              len(set(hvd.allgather_object(last, name="jl"))) == 1)
# the ranks' device orders agree again: an unnamed device all-reduce on every rank runs
x = gpu(t(4))
check("device allreduce after the joins", torch.equal(hvd.allreduce(x, op=hvd.Sum), x * n))

# ---- float16 on a GPU: the factor in half precision, as Horovod's GPU kernel
f = 0.3
x = t(5, (64,), torch.float16)
want = (torch.tensor(f, dtype=torch.float16) * x) * n         # Horovod's test's expectation
check("precondition: half and float32 factors round differently",
      not torch.equal(want, (x.float() * f).half() * n))
got = hvd.allreduce(gpu(x.clone()), op=hvd.Sum, prescale_factor=f, name="f16pre")
check("float16 prescale on a GPU", torch.equal(got, want), f"{got[:4]} against {want[:4]}")
got = hvd.allreduce(gpu(x.clone()), op=hvd.Sum, postscale_factor=f, name="f16post")
want = torch.tensor(f, dtype=torch.float16) * (x * n)
check("float16 postscale on a GPU", torch.equal(got, want), f"{got[:4]} against {want[:4]}")
device(None)
got = hvd.allreduce(x.clone(), op=hvd.Sum, prescale_factor=f, name="f16cpu")
check("float16 prescale on the CPU: float32 math", torch.equal(got, (x.float() * f).half() * n))

# ---- Adasum of GPU tensors: the host route's bits
xs = [t(10 + r, (33,), torch.float64), t(20 + r, (4, 4), torch.float32)]
host = [hvd.allreduce(v, op=hvd.Adasum, name=f"ad{i}") for i, v in enumerate(xs)]
device("all")
dev = [hvd.allreduce(gpu(v.clone()), op=hvd.Adasum, name=f"add{i}") for i, v in enumerate(xs)]
check("Adasum of GPU tensors", all(torch.equal(h, d) for h, d in zip(host, dev)))
y = gpu(xs[1].clone())
hvd.allreduce_(y, op=hvd.Adasum, name="ad_")
check("Adasum in place on a GPU tensor", torch.equal(y, host[1]))

raises("reducescatter with Adasum: NotImplementedError, as on the host",
       lambda: hvd.reducescatter(gpu(t(40, (2 * n, 3))), op=hvd.Adasum, name="rsad"),
       (NotImplementedError,))

# ---- a group of CPU and GPU tensors: a RuntimeError on every rank, then the job goes on
device("marked")
for call in ("grouped_allreduce", "grouped_allgather", "grouped_reducescatter"):
    group = [gpu(t(30, (n, 2))) if i % 2 == 0 else t(30, (n, 2)) for i in range(5)]
    raises(f"{call} of CPU and GPU tensors", lambda: getattr(hvd, call)(group, name=call))
got = hvd.grouped_allreduce([gpu(t(31)), gpu(t(32))], op=hvd.Sum, name="gok")
check("a grouped call on one device after the refusals",
      torch.equal(got[0], t(31) * n) and torch.equal(got[1], t(32) * n))

# ---- alltoall: received splits in the splits tensor's dtype, on its device
device("all")
rows = torch.arange(n * 2, dtype=torch.float32).view(n * 2, 1) + 100 * r
for splits, dtype in ((torch.full((n,), 2, dtype=torch.int32), torch.int32),
                      (torch.full((n,), 2, dtype=torch.int64), torch.int64),
                      ([2] * n, torch.int32)):
    out, got = hvd.alltoall(gpu(rows.clone()), splits, name=f"a2a{dtype}{type(splits).__name__}")
    check(f"alltoall received splits ({type(splits).__name__})",
          got.dtype == dtype and got.tolist() == [2] * n
          and got.device == getattr(splits, "device", torch.device("cpu")), f"{got!r}")
    want = torch.cat([torch.arange(2 * r, 2 * r + 2, dtype=torch.float32).view(2, 1) + 100 * q
                      for q in range(n)])
    check("alltoall rows", torch.equal(out, want), f"{out.reshape(-1).tolist()} against {want.reshape(-1).tolist()}")

if be.wrapped < 12:
    fails.append(f"the device path ran only {be.wrapped} times")
print(f"rank {r}: {'FAIL ' + ', '.join(fails) if fails else 'device rules ok'}", flush=True)
hvd.shutdown()
sys.exit(1 if fails else 0)
