"""Rank side of tests/gpu/test_device_path.py: device collectives end to end, on host-backed
stand-ins for device arrays (tests/gpu/host_backend.py), with inputs written late by a queued
"kernel" on the caller's stream. HVLITE_CUDA_AWARE picks the staged or the direct path."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # host_backend beside it
import numpy as np  # noqa: E402

import hvlite as hvd  # noqa: E402
from host_backend import FakeDeviceArray, install  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
be = install(seed=r)
fails = []


def device(data):
    """A device array whose contents arrive only when the caller's stream gets there."""
    a = np.full_like(data, 7)
    be.produce(lambda: a.__setitem__(Ellipsis, data))
    return FakeDeviceArray(a)


def check(what, got, want, exact=True):
    be.settle()
    g = got.a if isinstance(got, FakeDeviceArray) else got
    ok = g.shape == want.shape and g.dtype == want.dtype and (
        np.array_equal(g, want) if exact else np.allclose(g, want, rtol=1e-5, atol=1e-6))
    if not ok:
        fails.append(what)
        print(f"rank {r}: {what}: got {g.ravel()[:4]} {g.shape} {g.dtype}, want "
              f"{want.ravel()[:4]} {want.shape} {want.dtype}", flush=True)


def data(k, dtype=np.float32, shape=(3000,)):
    return (np.arange(np.prod(shape)).reshape(shape) % 97 + 10 * k + 1).astype(dtype)


everyone = lambda k, dt=np.float32, sh=(3000,): np.stack([data(q + k, dt, sh) for q in range(n)])
# all-reduce: every op, a size over several chunks (HVLITE_CUDA_CHUNK_BYTES=4096), async pairs
for op, ref in ((hvd.Sum, np.sum), (hvd.Min, np.min), (hvd.Max, np.max)):
    for dt in (np.float32, np.int32, np.float64):
        check(f"allreduce {op.name} {np.dtype(dt).name}",
              hvd.allreduce(device(data(r, dt)), op=op, name=f"ar.{op.name}.{np.dtype(dt).name}"),
              ref(everyone(0, dt), axis=0).astype(dt))
check("allreduce Average", hvd.allreduce(device(data(r)), name="avg"),
      np.mean(everyone(0), axis=0).astype(np.float32), exact=False)
h1 = hvd.allreduce_async(device(data(r, shape=(5, 7))), op=hvd.Sum, name="a1")
h2 = hvd.allreduce_async(device(data(r + 1, shape=(1,))), op=hvd.Sum, name="a2")
check("allreduce async 2", h2.synchronize(), everyone(1, sh=(1,)).sum(0).astype(np.float32))
check("allreduce async 1", h1.synchronize(), everyone(0, sh=(5, 7)).sum(0).astype(np.float32))
x = device(data(r))
back = hvd.allreduce_(x, op=hvd.Sum, name="inplace")
check("allreduce_ in place", x, everyone(0).sum(0).astype(np.float32))
if back is not x:
    fails.append("allreduce_ returns its argument")
check("grouped", hvd.grouped_allreduce([device(data(r)), device(data(r, np.int64, (4,)))],
                                       op=hvd.Sum, name="g")[1],
      everyone(0, np.int64, (4,)).sum(0))
# broadcast, in place and not
check("broadcast", hvd.broadcast(device(data(r, np.int16)), root_rank=n - 1, name="bc"),
      data(n - 1, np.int16))
y = device(data(r))
hvd.broadcast_(y, root_rank=0, name="bc_")
check("broadcast_", y, data(0))
# the others: whole-buffer staging
rows = lambda q: data(q, np.float32, (q + 1, 3))
check("allgather", hvd.allgather(device(rows(r)), name="ag"),
      np.concatenate([rows(q) for q in range(n)]))
check("reducescatter", hvd.reducescatter(device(data(r, shape=(n * 2, 5))), op=hvd.Sum,
                                         name="rs"),
      everyone(0, sh=(n * 2, 5)).sum(0)[2 * r:2 * r + 2].astype(np.float32))
splits = [1] * n
got, recv = hvd.alltoall(device(data(r, shape=(n, 2))), splits=splits, name="a2a")
check("alltoall", got, np.stack([data(q, shape=(n, 2))[r] for q in range(n)]))
check("alltoall splits", recv, np.ones(n, np.int64))
# bad input: raised on every rank, naming the problem
try:
    hvd.allreduce(device(np.zeros(4, np.complex64) if r == 1 else np.zeros(4, np.float32)),
                  name="bad")
    fails.append("complex64 accepted")
except hvd.DtypeError as e:
    if r != 1 or "complex64" not in str(e):
        fails.append(f"wrong DtypeError: {e}")
except hvd.InvalidArgumentError as e:
    if r == 1 or "rank(s) [1]" not in str(e):
        fails.append(f"wrong error: {e}")
# Adasum takes host arrays: refused on every rank, naming it
try:
    hvd.allreduce(device(data(r)), op=hvd.Adasum, name="adasum")
    fails.append("Adasum on a device array accepted")
except hvd.InvalidArgumentError as e:
    if "Adasum" not in str(e):
        fails.append(f"Adasum: {e}")
# a name that is not a string, on one rank: hvlite's error there, and the others learn of it
try:
    hvd.allreduce(device(data(r)), name=5 if r == 1 else "5")
    fails.append("an int name accepted")
except hvd.InvalidArgumentError as e:
    if (r == 1 and "must be a string" not in str(e)) or (r != 1 and "rank(s) [1]" not in str(e)):
        fails.append(f"int name: {e}")
except Exception as e:  # noqa: BLE001 - a raw error is the bug
    fails.append(f"int name: {type(e).__name__}: {e}")
# device collectives submitted in different orders: a clear error everywhere, no hang
a = hvd.allreduce_async(device(data(r)), name="first" if r % 2 == 0 else "second")
b = hvd.allreduce_async(device(data(r)), name="second" if r % 2 == 0 else "first")
for h in (a, b):
    try:
        h.synchronize()
        if n > 1:
            fails.append("out-of-order device collectives ran")
    except hvd.MismatchError as e:
        if "same order" not in str(e):
            fails.append(f"mismatch message: {e}")
check("after a mismatch", hvd.allreduce(device(data(r)), op=hvd.Sum, name="after"),
      everyone(0).sum(0).astype(np.float32))
print(f"rank {r}: {'FAIL ' + ', '.join(fails) if fails else 'ok'} "
      f"({os.environ.get('HVLITE_CUDA_AWARE')})", flush=True)
hvd.shutdown()
sys.exit(1 if fails else 0)
