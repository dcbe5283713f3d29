"""Each compression method's own properties, in one process (no communication needed)."""
import inspect

import numpy as np
import pytest

import hvlite
from hvlite.compression import Compression, PowerSGD, TopK
from hvlite.compression.sign import pack, unpack
from hvlite.errors import DtypeError, InvalidArgumentError
from hvlite.optim import SGD, DistributedOptimizer


def grad(shape=(40, 30), seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def roundtrip(c, x, name="t"):
    payload, ctx = c.compress(x, name)
    return payload, c.decompress(payload, ctx)


def test_fp16_and_bf16_within_their_epsilon():
    x = grad() * 10
    _, y = roundtrip(Compression.fp16, x)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert np.all(np.abs(y - x) <= np.abs(x) * 2.0 ** -11)          # half a float16 ulp
    assert not np.array_equal(y, x)                                   # it did round
    payload, y = roundtrip(Compression.bf16, x)
    assert payload[0].dtype.name == "bfloat16"
    assert np.all(np.abs(y - x) <= np.abs(x) * 2.0 ** -8)


def test_int8_error_is_within_half_a_step_of_its_chunk_scale():
    x = grad((1000,)) * np.repeat([1e-3, 1.0, 30.0, 0.0], 250)      # chunks of very different size
    c = Compression.int8(chunk=250)
    (scale, q), y = roundtrip(c, x)
    assert q.dtype == np.int8 and q.size == x.size and scale.size == 4 and scale[3] == 0
    step = np.repeat(np.abs(x).reshape(4, 250).max(axis=1) / 127, 250)
    assert np.all(np.abs(y - x) <= step / 2 * (1 + 1e-5))
    _, ys = roundtrip(Compression.int8(chunk=250, stochastic=True), x)
    assert np.all(np.abs(ys - x) <= step * (1 + 1e-5))
    assert np.abs(ys - x).mean() > 0


def test_stochastic_int8_is_unbiased():
    x = np.full(20000, 0.3049, np.float32)       # 30.49 steps of 0.01: nearest rounds down
    x[0] = 1.27                                  # sets the scale to 0.01
    c = Compression.int8(chunk=20000, stochastic=True)
    _, y = roundtrip(c, x)
    assert abs(y[1:].mean() - 0.3049) < 2e-4
    _, yn = roundtrip(Compression.int8(chunk=20000), x)
    assert abs(yn[1:].mean() - 0.3049) > 4e-4


def test_topk_keeps_exactly_the_k_largest_magnitudes():
    x = grad((50, 20), seed=3)
    c = Compression.topk(ratio=0.05)
    (idx, vals), y = roundtrip(c, x)
    k = 50
    expect = np.sort(np.argsort(-np.abs(x.ravel()))[:k])
    assert idx.size == k and np.array_equal(np.sort(idx.astype(np.int64)), expect)
    assert np.array_equal(vals, x.ravel()[expect])
    assert np.count_nonzero(y) == k and np.array_equal(y.ravel()[expect], x.ravel()[expect])


@pytest.mark.parametrize("make", [lambda: Compression.topk(ratio=0.03),
                                  lambda: Compression.randomk(ratio=0.03),
                                  lambda: Compression.sign(),
                                  lambda: Compression.powersgd(rank=2)],
                         ids=["topk", "randomk", "sign", "powersgd"])
def test_sent_plus_new_residual_is_gradient_plus_old_residual(make):
    c = make()
    old = np.zeros(1200, np.float32)
    for step in range(4):
        g = grad(seed=step)
        payload, ctx = c.compress(g, "w")
        sent = c.decompress(payload, ctx).ravel()
        new = c.residual("w").ravel()
        lhs, rhs = sent + new, g.ravel() + old
        if c.method in ("topk", "randomk"):
            assert np.array_equal(lhs, rhs)                  # a partition: exact
        else:
            assert np.allclose(lhs, rhs, rtol=1e-5, atol=1e-5)
        assert np.abs(new).max() > 0
        old = new.copy()


def test_topk_momentum_correction_accumulates_velocity_and_clears_what_was_sent():
    c = Compression.topk(ratio=0.1, momentum=0.9)
    u = np.zeros(100, np.float32)
    v = np.zeros(100, np.float32)
    for step in range(3):
        g = grad((100,), seed=step)
        u = 0.9 * u + g
        (idx, vals), _ = roundtrip(c, g, "w")
        v = v + u
        idx = idx.astype(np.int64)
        assert np.array_equal(vals, v[idx])
        v[idx] = 0
        u[idx] = 0
        assert np.array_equal(c.residual("w"), v)


def test_sign_momentum_feeds_the_velocity_through_error_feedback():
    c = Compression.sign(momentum=0.5)
    u = np.zeros(300, np.float32)
    e = np.zeros(300, np.float32)
    for step in range(3):
        g = grad((300,), seed=step)
        u = 0.5 * u + g
        payload, ctx = c.compress(g, "w")
        sent = c.decompress(payload, ctx)
        assert np.allclose(sent + c.residual("w"), u + e, rtol=1e-5, atol=1e-6)
        e = c.residual("w").copy()


def test_sign_packs_eight_signs_per_byte_and_round_trips_exactly():
    rng = np.random.default_rng(5)
    for n in (1, 7, 8, 9, 1001):
        p = rng.standard_normal(n).astype(np.float32)
        p[::5] = 0.0                                         # zero counts as +
        bits = pack(p)
        assert bits.dtype == np.uint8 and bits.size == -(-n // 8)
        assert np.array_equal(unpack(bits, n, np.float32), np.where(p >= 0, 1.0, -1.0))
    x = grad(seed=6)
    (scale, bits), y = roundtrip(Compression.sign(), x)
    assert scale[0] == np.float32(np.abs(x).mean(dtype=np.float64))
    assert np.array_equal(y, np.where(x >= 0, scale[0], -scale[0]))


@pytest.mark.parametrize("r", [1, 2, 4])
def test_powersgd_is_exact_on_a_rank_r_matrix(r):
    rng = np.random.default_rng(r)
    m = (rng.standard_normal((60, r)) @ rng.standard_normal((r, 45))).astype(np.float64)
    c = Compression.powersgd(rank=r)
    (P, Q), y = roundtrip(c, m)
    assert P.shape == (60, r) and Q.shape == (45, r)
    assert np.allclose(P.T @ P, np.eye(r), atol=1e-10)      # orthogonalized once
    assert np.allclose(y, m, rtol=1e-9, atol=1e-9)
    assert np.abs(c.residual("t")).max() < 1e-9
    low = Compression.powersgd(rank=r)
    _, y_low = roundtrip(low, grad((60, 45), seed=9))
    assert np.linalg.matrix_rank(y_low, tol=1e-4) == r


def test_powersgd_error_feedback_lets_what_is_sent_catch_up_with_the_gradients():
    g = grad((30, 20), seed=1)
    c = Compression.powersgd(rank=2)
    total, sent, gap = np.zeros_like(g), np.zeros_like(g), []
    for step in range(300):
        total += g
        sent += roundtrip(c, g, "w")[1]
        gap.append(np.linalg.norm(total - sent) / np.linalg.norm(total))
    assert gap[-1] < 0.05 and gap[-1] < gap[20] / 4       # rank 2 alone would stay far off
    assert np.linalg.norm(g - roundtrip(Compression.powersgd(rank=2), g, "w")[1]) > 0.5 * np.linalg.norm(g)


def test_powersgd_sends_vectors_and_small_matrices_dense():
    c = Compression.powersgd(rank=4)
    for shape in [(100,), (6, 5), (3, 200)]:
        x = grad(shape)
        assert c.matrix_shape(shape) is None
        payload, y = roundtrip(c, x)
        assert len(payload) == 1 and np.array_equal(y, x)
    assert c.matrix_shape((64, 3, 3, 8)) == (64, 72)


@pytest.mark.parametrize("make, fragment", [
    (lambda: Compression.topk(ratio=0), "ratio must be a number in (0, 1], got 0"),
    (lambda: Compression.topk(ratio=1.5), "got 1.5"),
    (lambda: TopK(ratio=-0.1), "got -0.1"),
    (lambda: Compression.randomk(ratio="1%"), "got '1%'"),
    (lambda: Compression.randomk(ratio=True), "got True"),
    (lambda: Compression.powersgd(rank=0), "rank must be an integer >= 1, got 0"),
    (lambda: PowerSGD(rank=1.5), "got 1.5"),
    (lambda: Compression.int8(chunk=0), "chunk must be a positive integer"),
    (lambda: Compression.topk(momentum=1.0), "momentum must be in [0, 1)"),
    (lambda: Compression.sign(momentum=-0.1), "momentum must be in [0, 1)"),
    (lambda: Compression.fp16(dtype="int8"), "dtype must be 'float16' or 'bfloat16'"),
])
def test_bad_arguments_raise_clear_errors(make, fragment):
    with pytest.raises(InvalidArgumentError) as e:
        make()
    assert fragment in str(e.value)


@pytest.mark.parametrize("method", ["fp16", "bf16"])
def test_the_casts_take_any_tensor_and_op_as_horovods_do(method):
    """Horovod's fp16 compressor casts float tensors and leaves others as they are, whatever
    the op: an integer tensor goes uncast, Max and Adasum run on the 16-bit values."""
    c = getattr(Compression, method)
    for x, op in ((np.arange(6, dtype=np.int32), hvlite.Max), (grad(), hvlite.Max),
                  (grad(), hvlite.Adasum), (grad(), hvlite.Product)):
        c.check(x, "layer.w", op)
    hvlite.init()
    x = np.arange(6, dtype=np.int32)
    assert np.array_equal(hvlite.allreduce(x, op=hvlite.Max, compression=c), x)
    y = np.array([1.0001, -2.5, 3.0], np.float32)
    low = y.astype(c.wire).astype(np.float32)
    for op in (hvlite.Max, hvlite.Min, hvlite.Product, hvlite.Adasum, hvlite.Sum):
        got = hvlite.allreduce(y, op=op, compression=c, name=f"cast.any.{int(op)}")
        assert got.dtype == np.float32 and np.array_equal(got, low), (op, got, low)
    z = np.arange(5, dtype=np.int64)
    hvlite.allreduce_(z, op=hvlite.Sum, compression=c)
    assert np.array_equal(z, np.arange(5))


@pytest.mark.parametrize("method", ["int8", "topk", "randomk", "sign", "powersgd"])
def test_integer_tensors_and_non_sum_ops_are_refused(method):
    c = getattr(Compression, method)
    with pytest.raises(DtypeError, match=r"compression \w+ of 'layer.w': needs a floating-point tensor, got int32"):
        c.check(np.arange(6, dtype=np.int32), "layer.w")
    with pytest.raises(InvalidArgumentError, match="only Sum and Average .* got Max"):
        c.check(grad(), "layer.w", hvlite.Max)
    Compression.none.check(np.arange(6, dtype=np.int32), "layer.w", hvlite.Max)   # passes anything


def test_stateful_methods_need_a_name():
    with pytest.raises(InvalidArgumentError, match="stable name="):
        Compression.sign.check(grad(), None)


def test_namespace_entries_are_ready_and_calling_one_gives_fresh_state():
    a = Compression.topk(ratio=0.2)
    b = a()
    assert isinstance(b, TopK) and b.options == a.options and b.state is not a.state
    a.compress(grad(), "w")
    assert "w" in a.state and "w" not in b.state
    assert repr(a) == "Compression.topk(ratio=0.2, momentum=0.0)"
    assert "compression" in inspect.signature(hvlite.allreduce).parameters
    assert "compression" in inspect.signature(hvlite.allreduce_async).parameters


def test_distributed_optimizer_refuses_what_is_not_a_compressor():
    with pytest.raises(TypeError, match="hvlite.compression compressor"):
        DistributedOptimizer(SGD(0.1), {"w": np.zeros(3)}, compression="fp16")
