"""Rank side of tests/gpu/test_route_mpi.py: hvlite.route under MPI, on host-backed stand-ins
for device arrays. Arguments the device path cannot take, a CPU/GPU mix and an array on
another GPU fail on every rank (never a hang), and the runtime is right afterwards."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # host_backend beside it
import numpy as np  # noqa: E402

import hvlite as hvd  # noqa: E402
from hvlite.compression import Compression  # noqa: E402
from host_backend import FakeDeviceArray, install  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
be = install(seed=r)
fails = []


def x(k=0, device=0):
    return FakeDeviceArray(np.arange(64, dtype=np.float32) + 10 * r + k, device)


def expect_error(what, call, kinds, words):
    """`call` must raise one of `kinds` on this rank, its message holding one of `words`."""
    try:
        call()
        fails.append(f"{what}: no error")
    except kinds as e:
        if not any(w in str(e) for w in words):
            fails.append(f"{what}: message {e}")
    except Exception as e:  # noqa: BLE001 - another type is the bug
        fails.append(f"{what}: {type(e).__name__}: {e}")


def good(what, name):
    got = hvd.allreduce(x(), op=hvd.Sum, name=name)
    be.settle()
    want = sum(np.arange(64, dtype=np.float32) + 10 * q for q in range(n))
    if not np.array_equal(got.a, want):
        fails.append(f"{what}: wrong sum after")


bad = (hvd.InvalidArgumentError, hvd.MismatchError)
# algorithm= is the host path's: refused on every rank, naming it, sync and async alike
expect_error("algorithm=", lambda: hvd.allreduce(x(), algorithm="ring", name="alg"),
             bad, ["algorithm='ring'"])
expect_error("algorithm= in place", lambda: hvd.allreduce_async_(
    x(), algorithm="tree", name="alg_").synchronize(), bad, ["algorithm='tree'"])
good("after algorithm=", "ok1")
# compression= takes host arrays: refused on every rank
expect_error("compression=", lambda: hvd.allreduce(x(), name="cmp", compression=Compression.fp16),
             bad, ["compression="])
# only rank 1 passes algorithm=: it names the problem, the others name rank 1
expect_error("one rank's algorithm=", lambda: hvd.allreduce(
    x(), algorithm="ring" if r == 1 else None, name="alg1"), bad,
    ["algorithm='ring'"] if r == 1 else ["rank(s) [1]"])
good("after one rank's error", "ok2")
# a CPU/GPU mix under one name: every rank fails (Horovod's cpu_gpu_error), nobody waits
mixed = x() if r == 0 else np.arange(64, dtype=np.float32)
expect_error("CPU/GPU mix", lambda: hvd.allreduce(mixed, op=hvd.Sum, name="mix"), bad,
             ["mix"])
good("after the mix", "ok3")
# the same mix in flight beside a good device call: the mix fails everywhere, the call beside
# it either runs or fails on every rank alike (its order was counted before the mix failed),
# and the order agrees again afterwards
h_mix = hvd.allreduce_async(x() if r == 0 else np.arange(64, dtype=np.float32), name="mix2")
h_ok = hvd.allreduce_async(x(), op=hvd.Sum, name="beside")
expect_error("CPU/GPU mix in flight", h_mix.synchronize, bad, ["mix2"])
try:
    h_ok.synchronize()
    beside = "ran"
except hvd.MismatchError:
    beside = "failed"
if hvd.allgather_object(beside, name="beside.outcome") != [beside] * n:
    fails.append("the call beside the mix ended differently on different ranks")
good("after the mix in flight", "ok3b")
# an array on another GPU than the rank's: refused on every rank, naming both GPUs
expect_error("other GPU", lambda: hvd.allreduce(x(device=1 if r == n - 1 else 0), name="gpu1"),
             bad, ["GPU 1", f"rank(s) [{n - 1}]"])
# the same for the other collectives' device forms
expect_error("broadcast on another GPU", lambda: hvd.broadcast(
    x(device=1 if r == 0 else 0), root_rank=0, name="bgpu"), bad, ["GPU 1", "rank(s) [0]"])
# something that fails on one rank while the call is prepared (an allocation, say) fails
# before the ticket goes out, so every rank fails instead of waiting for that rank's data
real = be.caller_stream
if r == 1:
    def broken(x):
        raise MemoryError("out of device memory (stand-in)")
    be.caller_stream = broken
expect_error("a failure while preparing, on one rank",
             lambda: hvd.allreduce(x(), op=hvd.Sum, name="oom"), bad + (hvd.DtypeError,),
             ["out of device memory", "rank(s) [1]"])
be.caller_stream = real
good("at the end", "ok4")
print(f"rank {r}: {'FAIL ' + ', '.join(fails) if fails else 'route ok'}", flush=True)
hvd.shutdown()
sys.exit(1 if fails else 0)
