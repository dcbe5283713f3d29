"""Rank side: fp16/bf16 compression on one node reduces the float32 arrays themselves, rounding
every operand and every partial result to 16 bits (the core's "float32 as float16" codes). Every
call form must give NumPy's cast of each rank's input added in the 16-bit type (then divided
there for Average) and cast back, the same bits on every rank: on 2 ranks bit for bit (two
operands add alike in either order), on more within the 16-bit roundings of another order (the
algorithms and the segment's ways do not all add in rank order; neither do they for float16)."""
import os

import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
from helpers import assert_identical_everywhere, expect_raise_everywhere
from hvlite.compression import Compression, stats

ml_dtypes = pytest.importorskip("ml_dtypes")
N = MPI.COMM_WORLD.Get_size()
PAIR = hvd.ProcessSet([1, 2]) if N >= 3 else None      # a set of two within the node
PAIR_COMM = MPI.COMM_WORLD.Split(0 if MPI.COMM_WORLD.Get_rank() in (1, 2) else 1) if PAIR else None
hvd.init(process_sets=[PAIR] if PAIR else [])
WIRES = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}


def inputs(shape, seed):
    """Gradient-like float32 values over the 16-bit types' ranges (subnormals, values past
    float16's largest, ties), different on every rank."""
    rng = np.random.default_rng([hvd.rank(), seed])
    n = int(np.prod(shape))
    x = rng.standard_normal(n) * 10.0 ** rng.uniform(-8, 5.5, n)
    return x.astype(np.float32).reshape(shape)


def reference(x, wire, op):
    """Every rank's x (gathered), cast, added in rank order in `wire`, divided there for
    Average, cast back; and the sum of the casts' magnitudes (the rounding errors' scale)."""
    with np.errstate(all="ignore"):
        casts = [y.astype(wire).astype(np.float32) for y in MPI.COMM_WORLD.allgather(x)]
        acc = casts[0].astype(wire)
        for y in casts[1:]:
            acc = (acc.astype(np.float32) + y).astype(wire)
        if op == hvd.Average:
            acc = (acc.astype(np.float32) / np.float32(hvd.size())).astype(wire)
        return acc.astype(np.float32), np.sum(np.abs(casts), axis=0, dtype=np.float64)


def check(got, x, method, op, what):
    want, scale = reference(x, WIRES[method], op)
    assert got.dtype == np.float32 and got.shape == x.shape
    if hvd.size() == 2:
        assert got.tobytes() == want.tobytes(), what
    else:       # each 16-bit rounding off by half a unit at most
        finite = np.isfinite(scale) & (scale < float(np.finfo(np.float16).max) / 2)
        eps = 2.0 ** (-8 if method == "bf16" else -11)
        with np.errstate(invalid="ignore"):
            err = np.abs(got.astype(np.float64) - want)[finite]
        assert (err <= 2 * hvd.size() * eps * scale[finite] + 1e-7).all(), what
    assert_identical_everywhere(got, what)


def test_the_set_on_one_node_rounds_in_the_reduction():
    """On every rank alike, unless HVLITE_COMPRESSION_ROUND_IN_REDUCTION=0 (EXPECT_ROUND16,
    from the launcher)."""
    from hvlite import runtime
    from hvlite.process_sets import global_process_set, state_of
    st = state_of(runtime.current(), global_process_set, "test")
    assert st.round16 == (hvd.size() > 1 and os.environ.get("EXPECT_ROUND16", "1") == "1")
    assert runtime.lean is None or runtime.lean.round16 == st.round16


@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum], ids=["average", "sum"])
@pytest.mark.parametrize("method", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", [(1,), (7,), (256, 256), (3, 100003)])
def test_every_call_form_gives_the_16_bit_sum_in_rank_order(method, op, shape):
    """A hook's named in-place call (the lean way), an unnamed one (the general way), the
    out-of-place call and a strided array: the reference's bits, and the 16-bit payload
    counted. (3, 100003) is past the direct way's size on 5 ranks."""
    c = getattr(Compression, method)
    x = inputs(shape, len(shape) + shape[-1])
    tag = f"r16.{method}.{int(op)}.{shape}"
    y = x.copy()
    before = stats()["methods"].get(method, {}).get("payload_bytes", 0)
    assert hvd.synchronize(hvd.allreduce_async_(y, op=op, name=tag, compression=c)) is y
    assert stats()["methods"][method]["payload_bytes"] - before == x.size * 2
    check(y, x, method, op, tag)
    z = x.copy()
    assert hvd.allreduce_(z, op=op, compression=c) is z
    check(z, x, method, op, tag + ".unnamed")
    new = hvd.allreduce(x, op=op, name=tag + ".new", compression=c)
    check(new, x, method, op, tag + ".new")
    wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), np.float32)
    wide[..., ::2] = x
    hvd.allreduce_(wide[..., ::2], op=op, name=tag + ".strided", compression=c)
    check(np.ascontiguousarray(wide[..., ::2]), x, method, op, tag + ".strided")
    assert not wide[..., 1::2].any()


@pytest.mark.parametrize("method", ["fp16", "bf16"])
def test_a_step_of_hook_calls_fuses_and_keeps_the_bits(method):
    """A backward pass's burst: 60 tensors submitted at once (fused batches, through the slots
    and directly) then synchronized, each the reference's bits."""
    c = getattr(Compression, method)
    shapes = [(256, 256), (256,)] * 20 + [(16,)] * 10 + [(1000, 3)] * 10
    xs = [inputs(s, i) for i, s in enumerate(shapes)]
    ys = [x.copy() for x in xs]
    hs = [hvd.allreduce_async_(y, name=f"step.{method}.{i}", compression=c)
          for i, y in enumerate(ys)]
    for h in hs:
        hvd.synchronize(h)
    for i, (x, y) in enumerate(zip(xs, ys)):
        check(y, x, method, hvd.Average, f"step.{method}.{i}")


def test_a_rank_whose_tensor_differs_fails_on_every_rank():
    """Horovod's mismatch rule holds on this way too: a shape that differs on rank 0 fails the
    call on every rank, naming it, and the next call runs."""
    x = np.ones(5 if hvd.rank() == 0 else 6, np.float32)

    def go():
        hvd.allreduce_(x, op=hvd.Sum, name="r16.bad", compression=Compression.fp16)
    expect_raise_everywhere(go, hvd.HvliteError, "r16.bad")
    y = np.ones(3, np.float32)
    hvd.allreduce_(y, op=hvd.Sum, name="r16.bad", compression=Compression.fp16)
    assert y.tolist() == [float(hvd.size())] * 3


@pytest.mark.parametrize("method", ["fp16", "bf16"])
def test_a_process_set_of_two_on_the_node_rounds_its_own_reduction(method):
    """process_set=: the set's own state decides (two ranks of the node), Average divides by
    the set's size, and its two members' sum is bit for bit NumPy's; the others take no part."""
    from hvlite import runtime
    from hvlite.process_sets import state_of
    if PAIR is None:
        pytest.skip("needs 3 ranks")
    if hvd.rank() not in (1, 2):
        return
    assert state_of(runtime.current(), PAIR, "test").round16 == (
        os.environ.get("EXPECT_ROUND16", "1") == "1")
    c = getattr(Compression, method)
    x = inputs((3, 1001), 99)
    y = x.copy()
    hvd.allreduce_(y, name=f"pair.{method}", compression=c, process_set=PAIR)
    both = PAIR_COMM.allgather(x)
    wire = WIRES[method]
    with np.errstate(all="ignore"):
        want = (both[0].astype(wire).astype(np.float32) + both[1].astype(wire).astype(np.float32)).astype(wire)
        want = (want.astype(np.float32) / np.float32(2)).astype(wire).astype(np.float32)
    assert y.tobytes() == want.tobytes()


def test_float32_on_one_rank_and_float64_on_another_fail_on_every_rank():
    """On one node float32 is reduced as itself and float64 is cast, so the two no longer meet
    as float16: the call fails with MismatchError on every rank, naming the tensor and the
    dtypes, and the job goes on. With the setting off both are cast and reduced: rank 0's call
    takes the lean way, the others' the general way, and under HVLITE_ALLREDUCE_ALGORITHM both
    must submit that algorithm (the lean way's said auto: "ranks disagree on algorithm")."""
    x = np.ones(4, np.float32 if hvd.rank() == 0 else np.float64)

    def go():
        hvd.allreduce_(x, op=hvd.Sum, name="r16.mixed", compression=Compression.fp16)
    if os.environ.get("EXPECT_ROUND16", "1") == "1" and hvd.size() > 1:
        expect_raise_everywhere(go, hvd.MismatchError, "r16.mixed", "dtype")
    else:
        go()
        assert x.tolist() == [float(hvd.size())] * 4
    y = np.ones(3, np.float32)
    hvd.allreduce_(y, op=hvd.Sum, name="r16.after", compression=Compression.fp16)
    assert y.tolist() == [float(hvd.size())] * 3
