"""Rank side: compressed all-reduces equal the reference built from every rank's own payloads,
the same bits on every rank, over several steps of error feedback; training with compression
keeps the ranks identical; bad input fails every rank; bytes reach stats() and the timeline."""
import json
import os
import tempfile

import numpy as np
import pytest

import hvlite as hvd
from helpers import assert_everywhere, assert_identical_everywhere, expect_raise_everywhere
from hvlite.compression import Compression, stats
from hvlite.errors import DtypeError, HvliteError, MismatchError
from hvlite.optim import SGD, DistributedOptimizer
from mpi4py import MPI

hvd.init()
N, RANK = hvd.size(), hvd.rank()
COMM = MPI.COMM_WORLD

METHODS = {
    "none": lambda: Compression.none,
    "fp16": lambda: Compression.fp16,
    "bf16": lambda: Compression.bf16,
    "int8": lambda: Compression.int8(chunk=100),
    "int8_stochastic": lambda: Compression.int8(chunk=100, stochastic=True, seed=3),
    "topk": lambda: Compression.topk(ratio=0.05),
    "topk_momentum": lambda: Compression.topk(ratio=0.05, momentum=0.9),
    "randomk": lambda: Compression.randomk(ratio=0.05),
    "sign": lambda: Compression.sign(),
    "powersgd": lambda: Compression.powersgd(rank=2),
}
# Reduced from all-gathered payloads in rank order: must match the reference bit for bit.
GATHERED = {"int8", "int8_stochastic", "topk", "topk_momentum", "sign"}


def rank_grad(step, shape=(48, 25), rank=RANK):
    return np.random.default_rng([step, rank]).standard_normal(shape).astype(np.float32)


def reference(c, g, name, op):
    """Every rank's payload (from this rank's twin compressor), decoded and summed in rank order;
    PowerSGD's reference is its two averaging rounds redone in NumPy on all ranks' matrices."""
    if c.method == "powersgd":
        st, M, P = c._start(g, name)
        Ms = COMM.allgather(M)
        P = np.linalg.qr(sum(m @ st["q"] for m in Ms) / N)[0]
        Q = sum(m.T @ P for m in Ms) / N
        st["q"], st["e"] = Q, M - P @ Q.T
        out = P @ Q.T * (N if op == hvd.Sum else 1)
    else:
        payload, ctx = c.compress(g, name)
        parts = [c.decompress(p, x) for p, x in COMM.allgather((payload, ctx))]
        if c.method in ("fp16", "bf16"):
            parts = [p.astype(np.float64) for p in parts]
        out = np.zeros_like(parts[0])
        for p in parts:
            out += p
        if op == hvd.Average:
            out /= np.asarray(N, out.dtype)
    return out.astype(g.dtype)


@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum], ids=["average", "sum"])
@pytest.mark.parametrize("method", list(METHODS))
def test_compressed_allreduce_equals_the_reference_from_the_same_payloads(method, op):
    c, twin = METHODS[method](), METHODS[method]()
    if c is twin:                                        # stateless entries are shared
        twin = METHODS[method]()
    failures = []
    for step in range(3):
        g = rank_grad(step)
        name = f"{method}.{int(op)}"
        got = hvd.allreduce(g, op=op, name=name, compression=c)
        ref = reference(twin, g, name, op)
        assert_identical_everywhere(got, f"{method} step {step}")
        if got.shape != g.shape or got.dtype != g.dtype:
            failures.append(f"{method}: result {got.shape} {got.dtype}")
        elif method in GATHERED:
            if got.tobytes() != ref.tobytes():
                failures.append(f"{method} step {step}: differs from the reference by "
                                f"{np.abs(got - ref).max()}")
        else:
            eps = {"fp16": 2e-3, "bf16": 1.6e-2}.get(method, 1e-5)
            scale = max(np.abs(ref).max(), 1.0)
            if not np.allclose(got, ref, rtol=N * eps, atol=N * eps * scale):
                failures.append(f"{method} step {step}: off the reference by "
                                f"{np.abs(got - ref).max()} (scale {scale})")
    assert_everywhere(failures)


def test_none_passes_any_dtype_and_op_through_and_hvlite_exports_compression():
    assert hvd.Compression is Compression
    x = np.arange(10, dtype=np.int64) * (RANK + 1)
    got = hvd.allreduce(x, op=hvd.Max, name="none.int", compression=Compression.none)
    assert got.dtype == np.int64 and np.array_equal(got, np.arange(10) * N)


def test_async_handles_and_stats_count_the_bytes_sent():
    c = Compression.topk(ratio=0.1)
    for step in range(2):
        hs = [c.allreduce_async(rank_grad(step, (100, 10), RANK + i), name=f"stats.w{i}")
              for i in range(2)]
        out = [h.synchronize() for h in hs]
    k = 100                                               # 10% of 1000, uint16 indices
    for i in range(2):
        t = stats()["tensors"]["topk"][f"stats.w{i}"]
        assert t["calls"] == 2 and t["payload_bytes"] == 2 * (8 + k * (2 + 4))
        assert t["last"] == {"dense_bytes": 4000, "payload_bytes": 8 + k * 6,
                             "wire_bytes": (N - 1) * (8 + k * 6)}
    assert all(0 < np.count_nonzero(o) <= N * k for o in out)


@pytest.mark.parametrize("method", ["fp16", "topk", "sign", "powersgd"])
def test_training_with_compression_keeps_every_rank_identical(method):
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((20, 12)).astype(np.float32),
              "b": np.zeros(12, np.float32)}
    opt = DistributedOptimizer(SGD(0.05), params,
                               compression=METHODS[method](), prefix=f"train.{method}.")
    x = rng.standard_normal((N * 16, 20)).astype(np.float32)
    target = x @ rng.standard_normal((20, 12)).astype(np.float32)
    mine = slice(RANK * 16, (RANK + 1) * 16)
    losses = []
    for step in range(40):
        err = x[mine] @ params["w"] + params["b"] - target[mine]
        losses.append(float((err ** 2).mean()))
        opt.grad_ready("b", 2 * err.mean(axis=0))
        opt.grad_ready("w", 2 * x[mine].T @ err / len(err))
        opt.step()
    for k in params:
        assert_identical_everywhere(params[k], f"{method} parameter {k}")
    assert_everywhere([] if losses[-1] < 0.5 * losses[0] else
                      [f"{method}: loss {losses[0]:.3f} -> {losses[-1]:.3f}"])


def test_an_integer_tensor_on_one_rank_fails_every_rank():
    g = np.arange(40, dtype=np.int64) if RANK == 0 else rank_grad(0, (40,))

    def go():
        hvd.allreduce(g, name="bad.dtype", compression=Compression.topk(ratio=0.1))
    expect_raise_everywhere(go, (DtypeError, HvliteError), "needs a floating-point tensor",
                            "int64", "bad.dtype")


@pytest.mark.parametrize("method", ["topk", "sign", "int8"])
def test_a_shape_that_differs_across_ranks_fails_every_rank(method):
    g = rank_grad(0, (40 + RANK,))

    def go():
        hvd.allreduce(g, name=f"bad.shape.{method}", compression=METHODS[method]())
    expect_raise_everywhere(go, MismatchError, method, f"bad.shape.{method}")


STATEFUL = {
    "topk_momentum": lambda: Compression.topk(ratio=0.05, momentum=0.9),
    "randomk": lambda: Compression.randomk(ratio=0.05),
    "sign_momentum": lambda: Compression.sign(momentum=0.5),
    "powersgd": lambda: Compression.powersgd(rank=2),
}


@pytest.mark.parametrize("method", list(STATEFUL))
def test_a_failed_call_leaves_the_ranks_state_in_step(method):
    """Rank 0's array is read-only, so its in-place call fails before it sends and its state
    stays as it was; the other ranks' calls fail at the exchange, and theirs goes back too.
    The steps after it then give exactly what a compressor that never saw the failed call
    gives, under the same name (random-k's step seed draws the same indices on every rank; no
    residual lost what was never reduced), on every rank. The gathered methods sum in rank
    order, the same bits; the all-reduced ones to rounding (auto's trials may run the two
    compressors' calls through different algorithms, which add in other orders from 3 ranks)."""
    tried, clean = STATEFUL[method](), STATEFUL[method]()
    name = f"undo.{method}"
    shape = (24, 16)
    fails = []

    def same(a, b):
        if method in ("topk_momentum", "sign_momentum"):
            return a.tobytes() == b.tobytes()
        return np.allclose(a, b, rtol=1e-5, atol=1e-6)

    def both(step):
        g = rank_grad(step, shape)
        a = hvd.allreduce(g, name=name, compression=tried)
        b = hvd.allreduce(g, name=name, compression=clean)
        if not same(a, b):
            fails.append(f"step {step}: {a.ravel()[:3]} against {b.ravel()[:3]}")
        assert_identical_everywhere(a, f"{method} step {step}")
    for step in range(2):
        both(step)
    bad = rank_grad(7, shape)
    if RANK == 0:
        bad.flags.writeable = False

    def go():
        hvd.allreduce_(bad, name=name, compression=tried)
    expect_raise_everywhere(go, HvliteError, "read-only", name)
    for step in range(2, 5):
        both(step)
    ra, rb = tried.residual(name), clean.residual(name)
    if (ra is None) != (rb is None) or (ra is not None and not same(ra, rb)):
        fails.append("the residual differs from the clean compressor's")
    assert_everywhere(fails)


def test_the_timeline_shows_each_compression_with_its_bytes():
    path = COMM.bcast(os.path.join(tempfile.mkdtemp(), "trace.json") if RANK == 0 else None)
    hvd.start_timeline(path)
    c = Compression.sign()
    hvd.allreduce(rank_grad(0, (64, 8)), name="traced.w", compression=c)
    hvd.stop_timeline()
    failures = []
    if RANK == 0:
        with open(path) as f:
            events = json.load(f)
        rows = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        marks = [e for e in events if e.get("name") == "COMPRESS_SIGN"]
        want = {"tensor": "traced.w", "method": "sign", "dense_bytes": 2048,
                "payload_bytes": 8 + 4 + 64, "wire_bytes": (N - 1) * 76}
        if len(marks) != 1 or marks[0]["args"] != want or rows.get(marks[0]["tid"]) != "traced.w":
            failures.append(f"compression events {marks}, rows {rows}")
        if not any(e.get("name") == "ALLGATHER" and rows.get(e["tid"]) == "traced.w" for e in events):
            failures.append("no ALLGATHER on the tensor's row")
    assert_everywhere(failures)
