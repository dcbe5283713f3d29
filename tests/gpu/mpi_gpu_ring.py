"""Rank side of tests/gpu/test_ring.py: the CUDA-aware ring run over MPI with NumPy as the
array module, checked against the core's own all-reduce (bitwise, except float sums, whose
value depends on the order of additions), against NumPy, and across ranks (bitwise)."""
import sys

import numpy as np
from mpi4py import MPI

import hvlite as hvd
from hvlite.gpu import ring
from hvlite.ops import ReduceOp

comm = MPI.COMM_WORLD.Dup()
n, r = comm.Get_size(), comm.Get_rank()
hvd.init()
fails = 0
for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8):
    for count in (0, 1, n - 1, 7, 1000, 4097):
        for op in (o for o in ReduceOp if o != ReduceOp.Adasum):     # the elementwise ops
            rng = np.random.default_rng(1000 * r + count)
            if np.dtype(dtype).kind == "f":
                x = rng.standard_normal(count).astype(dtype)
            else:
                lo = -50 if np.dtype(dtype).kind == "i" else 0
                x = rng.integers(lo, 50, count).astype(dtype)
            if op == ReduceOp.Product:
                x = (x % 3 + 1).astype(dtype) if x.dtype.kind != "f" else \
                    (np.sign(x) + (x == 0)).astype(dtype)
            everyone = comm.allgather(x)
            got = ring.allreduce(comm, x.copy(), op, np)
            core = hvd.allreduce(x, op=op, name=f"ref.{np.dtype(dtype).name}.{count}.{op.name}")
            inexact = np.dtype(dtype).kind == "f" and op in (ReduceOp.Sum, ReduceOp.Average)
            # a float sum depends on the order of additions, which differs between algorithms
            same = (np.allclose(got, core, rtol=1e-2 if dtype == np.float16 else 1e-5,
                                atol=1e-2 if dtype == np.float16 else 1e-6)
                    if inexact else np.array_equal(got, core))
            if not same or got.dtype != core.dtype:
                fails += 1
                print(f"rank {r}: {np.dtype(dtype).name} {count} {op.name}: ring differs from "
                      f"the core: {got[:4]} vs {core[:4]}", flush=True)
            if np.dtype(dtype).kind != "f" and op in (ReduceOp.Sum, ReduceOp.Min, ReduceOp.Max):
                ref = {ReduceOp.Sum: np.sum, ReduceOp.Min: np.min,
                       ReduceOp.Max: np.max}[op](np.stack(everyone), axis=0).astype(dtype)
                if not np.array_equal(got, ref):
                    fails += 1
                    print(f"rank {r}: {op.name} {count}: ring differs from NumPy", flush=True)
            all_same = comm.allgather(got.tobytes())
            if any(a != all_same[0] for a in all_same):
                fails += 1
                print(f"rank {r}: results differ between ranks", flush=True)
# Min/Max of NaN, infinities and signed zeros: the core's rule, so the ring and the core agree
# bit for bit (NaN as the default quiet NaN, -0 below +0) and so do the ranks.
specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 2.5, -2.5])
for dtype in (np.float32, np.float64, np.float16):
    for op in (ReduceOp.Min, ReduceOp.Max):
        x = np.random.default_rng([9, r]).choice(specials, 1001).astype(dtype)
        got = ring.allreduce(comm, x.copy(), op, np)
        core = hvd.allreduce(x, op=op, name=f"special.{np.dtype(dtype).name}.{op.name}")
        if got.tobytes() != core.tobytes():
            fails += 1
            print(f"rank {r}: {np.dtype(dtype).name} {op.name} of specials: ring differs from "
                  f"the core bitwise", flush=True)
        if len(set(comm.allgather(got.tobytes()))) != 1:
            fails += 1
            print(f"rank {r}: {op.name} of specials differ between ranks", flush=True)
hvd.shutdown()
print(f"rank {r}: ring {'FAIL' if fails else 'ok'}", flush=True)
sys.exit(1 if fails else 0)
