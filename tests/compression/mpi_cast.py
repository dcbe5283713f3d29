"""Rank side: the fp16/bf16 compressed all-reduce (the core's cast, an in-place reduction of the
wire buffer) equals the plain all-reduce of NumPy's cast, cast back, bit for bit, on every rank."""
import numpy as np
import pytest

import hvlite as hvd
from helpers import assert_everywhere, assert_identical_everywhere, expect_raise_everywhere
from hvlite.compression import Compression

ml_dtypes = pytest.importorskip("ml_dtypes")
hvd.init()
WIRES = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}


@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum], ids=["average", "sum"])
@pytest.mark.parametrize("method", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", [(256, 256), (7,), (3, 1001)])
def test_compressed_allreduce_is_the_cast_allreduce(method, op, shape):
    rng = np.random.default_rng([hvd.rank(), len(shape)])
    g = (rng.standard_normal(shape) * 1e-4).astype(np.float32)
    name = f"cast.{method}.{int(op)}.{shape}"
    got = hvd.allreduce(g, op=op, name=name, compression=getattr(Compression, method))
    want = hvd.allreduce(g.astype(WIRES[method]), op=op, name=name + ".plain").astype(np.float32)
    assert got.dtype == np.float32 and got.shape == g.shape
    assert got.tobytes() == want.tobytes()
    assert_identical_everywhere(got, name)


@pytest.mark.parametrize("method", ["fp16", "bf16", "int8"])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("call", ["allreduce_", "allreduce_async_"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_in_place_compressed_allreduce_writes_the_same_bits_into_x(method, layout, call, dtype):
    """allreduce_(x, compression=...) leaves in x exactly what allreduce(x, compression=...)
    returns (the cast methods write their last pass into x, the others copy), for strided x
    too, and returns x. float64 takes NumPy's cast outside the core's kernel."""
    c = getattr(Compression, method)
    rng = np.random.default_rng([hvd.rank(), 7])
    base = (rng.standard_normal((64, 34)) * 1e-3).astype(dtype)
    x = base if layout == "contiguous" else base[:, ::2]
    name = f"inplace.{method}.{layout}.{call}.{np.dtype(dtype).name}"
    want = hvd.allreduce(x.copy(), name=name + ".new", compression=c)
    if call == "allreduce_":
        got = hvd.allreduce_(x, name=name, compression=c)
    else:
        got = hvd.synchronize(hvd.allreduce_async_(x, name=name, compression=c))
    assert got is x
    assert x.tobytes() == want.tobytes()
    assert_identical_everywhere(np.ascontiguousarray(x), name)


def test_in_place_compressed_allreduce_of_a_read_only_array_fails_on_every_rank():
    """Only rank 0's array is read-only: every rank's call fails with its reason, and the job
    goes on."""
    x = np.ones(16, np.float32)
    if hvd.rank() == 0:
        x.flags.writeable = False

    def go():
        hvd.allreduce_(x, name="ro.x", compression=Compression.fp16)
    expect_raise_everywhere(go, hvd.HvliteError, "read-only", "ro.x")
    y = np.ones(4, np.float32)
    assert hvd.allreduce_(y, op=hvd.Sum, name="ro.after")[0] == hvd.size()


def test_compressed_allreduce_keeps_a_0d_array_0d():
    """np.ascontiguousarray makes 0-d arrays 1-d: the result keeps the caller's shape, in place
    (a scalar parameter's gradient) and out of place."""
    x = np.array(0.25 * (hvd.rank() + 1), np.float32)
    got = hvd.allreduce(x, op=hvd.Sum, name="scalar.new", compression=Compression.fp16)
    assert got.shape == () and float(got) == 0.25 * hvd.size() * (hvd.size() + 1) / 2
    y = x.copy()
    assert hvd.allreduce_(y, op=hvd.Sum, name="scalar.inplace", compression=Compression.fp16) is y
    assert y.shape == () and y.tobytes() == got.tobytes()


@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum], ids=["average", "sum"])
@pytest.mark.parametrize("method", ["fp16", "bf16"])
def test_the_hooks_short_way_writes_and_counts_what_the_general_way_does(method, op):
    """A named C-contiguous float32 array reduced in place on the global set (a gradient hook's
    call) takes Cast's short way (the cast, the lean face's submit, the cast back); an unnamed
    one takes the general way. Both write the same bits, return x, count the same bytes in
    stats(), and out of place the short way gives a new float32 array of the same bits."""
    from hvlite.compression import stats
    c = getattr(Compression, method)
    rng = np.random.default_rng([hvd.rank(), 11])
    g = (rng.standard_normal((300, 7)) * 1e-3).astype(np.float32)
    short, general = g.copy(), g.copy()
    before = stats()["methods"].get(method, {}).get("payload_bytes", 0)
    h = hvd.allreduce_async_(short, op=op, name=f"short.{method}.{int(op)}", compression=c)
    assert type(h).__name__ == "CastHandle", type(h)        # the lean way was taken
    assert hvd.synchronize(h) is short
    middle = stats()["methods"][method]["payload_bytes"]
    assert hvd.synchronize(hvd.allreduce_async_(general, op=op, compression=c)) is general
    after = stats()["methods"][method]["payload_bytes"]
    assert short.tobytes() == general.tobytes()
    assert middle - before == after - middle == g.size * 2
    new = hvd.allreduce(g, op=op, name=f"short.new.{method}.{int(op)}", compression=c)
    assert new is not g and new.dtype == np.float32 and new.tobytes() == short.tobytes()
    assert_identical_everywhere(short, f"short.{method}")


def test_the_lean_ways_handle_fails_on_every_rank_and_its_cast_is_not_reused_in_flight():
    """A hook's call whose shape differs on one rank fails at synchronize on every rank,
    naming the tensor, and the next calls of that name run. The cast the lean way keeps per
    name is reused only once nothing else holds it: rank 0 calls a name again while its first
    call waits for the others (Horovod's duplicate-name error), and the first call's result is
    still right (had the second call cast into the first's buffer, it would read 3s)."""
    from mpi4py import MPI
    from hvlite import runtime
    if runtime.lean is None:
        pytest.skip("no lean face")
    c = Compression.fp16
    n = 7 if hvd.rank() == 0 else 8
    x = np.ones(n, np.float32)

    def go():
        hvd.synchronize(hvd.allreduce_async_(x, op=hvd.Sum, name="lean.bad", compression=c))
    expect_raise_everywhere(go, hvd.HvliteError, "lean.bad")
    y = np.ones(3, np.float32)
    assert hvd.allreduce_(y, op=hvd.Sum, name="lean.bad", compression=c) is y
    assert y.tolist() == [float(hvd.size())] * 3
    first, second = np.full(5, 1.0, np.float32), np.full(5, 3.0, np.float32)
    failures = []
    if hvd.rank() == 0:
        h1 = hvd.allreduce_async_(first, op=hvd.Sum, name="lean.dup", compression=c)
        assert type(h1).__name__ == "CastHandle"
        try:
            hvd.allreduce_async_(second, op=hvd.Sum, name="lean.dup", compression=c)
            failures.append("no DuplicateNameError")
        except hvd.DuplicateNameError:
            pass
        MPI.COMM_WORLD.Barrier()
    else:
        MPI.COMM_WORLD.Barrier()
        h1 = hvd.allreduce_async_(first, op=hvd.Sum, name="lean.dup", compression=c)
    if hvd.synchronize(h1) is not first or first.tolist() != [float(hvd.size())] * 5:
        failures.append(f"the first call gave {first.tolist()}")
    assert_everywhere(failures)


@pytest.mark.parametrize("method", ["fp16", "bf16"])
def test_a_burst_of_hook_calls_on_the_lean_way_gives_the_casts_all_reduce(method):
    """A step's burst of hook calls on the lean way (tiny tensors that ride in the agreement,
    mid-sized ones fused together, a large one), synchronized only after all were submitted:
    every array holds the plain all-reduce of the cast, cast back, the same bits on every rank;
    bit for bit on 2 ranks, where every path adds the same two values (from 3 a fused batch
    and a single call may add in another order, rounding each sum to 16 bits)."""
    c = getattr(Compression, method)
    rng = np.random.default_rng([hvd.rank(), 23])
    sizes = [3, 1, 257, 4099, 65536, 7, 300000]
    xs = [(rng.standard_normal(n) * 1e-3).astype(np.float32) for n in sizes]
    for op in (hvd.Average, hvd.Sum):
        got = [x.copy() for x in xs]
        hs = [hvd.allreduce_async_(g, op=op, name=f"burst.{method}.{int(op)}.{k}", compression=c)
              for k, g in enumerate(got)]
        assert all(type(h).__name__ == "CastHandle" for h in hs), [type(h) for h in hs]
        assert [hvd.synchronize(h) is g for h, g in zip(hs, got)] == [True] * len(got)
        for k, (x, g) in enumerate(zip(xs, got)):
            want = hvd.allreduce(x.astype(WIRES[method]), op=op,
                                 name=f"burst.want.{method}.{int(op)}.{k}").astype(np.float32)
            if hvd.size() == 2:
                assert g.tobytes() == want.tobytes(), (method, int(op), sizes[k])
            else:
                np.testing.assert_allclose(g, want, rtol=3e-2, atol=2e-5)   # a few ulps of 1e-3
            assert_identical_everywhere(g, f"burst.{method}.{int(op)}.{k}")
