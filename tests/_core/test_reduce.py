"""The reduction kernels against NumPy, element for element, in one process."""
import itertools

import numpy as np
import pytest

import minmax_rule
from hvlite._core.codes import DTYPES
from hvlite._core.dtypes import ARRAY_NAMES, code_of, size_of, supported_names
from hvlite._core.kernels.reduce import (divide_array, reduce_arrays, reduce_arrays_to,
                                         stream_copy_array)
from hvlite.ops import Max, Min, Product, Sum

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
SUM, MIN, MAX = int(Sum), int(Min), int(Max)
OPS = {SUM: np.add, MIN: np.minimum, MAX: np.maximum, int(Product): np.multiply}
ALL = [BF16 if n == "bfloat16" else np.dtype(n) for n in ARRAY_NAMES]


def sample(dtype, n=1037, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == BF16 or np.issubdtype(dtype, np.floating):
        return (rng.standard_normal(n) * 50).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("op", sorted(OPS))
def test_kernel_matches_numpy_bitwise(dtype, op):
    a, b = sample(dtype, seed=1), sample(dtype, seed=2)
    want = OPS[op](a, b).astype(dtype)   # integer overflow wraps in NumPy too
    got = a.copy()
    with np.errstate(over="ignore"):
        reduce_arrays(got.view(np.uint8), b.view(np.uint8), code_of(dtype), op)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("n", [1, 15, 17, 1037, 5003])
def test_out_of_place_kernel_matches_numpy_bitwise(dtype, op, n):
    """dst = a (op) b in one pass (float Sum's vector loop, its tails) or chunk by chunk (the
    rest, across several 4 KiB chunks): NumPy's bits, the inputs untouched; with dst the first
    operand itself it is the in-place kernel."""
    a, b = sample(dtype, n, seed=1), sample(dtype, n, seed=2)
    a0, b0 = a.copy(), b.copy()
    with np.errstate(over="ignore"):
        want = OPS[op](a, b).astype(dtype)
    got = np.full_like(a, 7)
    with np.errstate(over="ignore"):
        reduce_arrays_to(got.view(np.uint8), a.view(np.uint8), b.view(np.uint8), code_of(dtype), op)
    assert got.tobytes() == want.tobytes()
    assert a.tobytes() == a0.tobytes() and b.tobytes() == b0.tobytes()
    with np.errstate(over="ignore"):
        reduce_arrays_to(a.view(np.uint8), a.view(np.uint8), b.view(np.uint8), code_of(dtype), op)
    assert a.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 128])
def test_divide_matches_numpy(dtype, n):
    a = sample(dtype, seed=3)
    if dtype == BF16 or np.issubdtype(dtype, np.floating):
        want = (a / np.asarray(n, dtype)).astype(dtype)
    else:   # truncation toward zero, as C's integer division
        q = np.abs(a.astype(object)) // n
        want = np.array([v if x >= 0 else -v for x, v in zip(a.astype(object), q)], dtype=dtype)
    got = a.copy()
    divide_array(got.view(np.uint8), code_of(dtype), n)
    assert got.tobytes() == want.tobytes()
    copied = np.zeros_like(a)       # divided as it is copied: every dtype, the same bits
    divide_array(copied.view(np.uint8), code_of(dtype), n, a.view(np.uint8))
    assert copied.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
@pytest.mark.parametrize("n", [2, 3, 4, 5, 1024, 1 << 20])
def test_divide_edges_match_numpy(dtype, n):
    """A power-of-two divisor is a multiplication by its exact reciprocal: the same bits as the
    quotient on the values where rounding differs first (subnormals halved onto a tie, the
    largest and smallest numbers, infinities, NaN, -0)."""
    info = np.finfo(dtype)
    tiny = info.smallest_subnormal
    edges = np.array([tiny, 3 * tiny, 5 * tiny, 7 * tiny, -3 * tiny, info.tiny, info.tiny * 3,
                      info.max, -info.max, info.eps, 1 + info.eps, np.inf, -np.inf, np.nan,
                      -0.0, 0.0, 1.0, 3.0], dtype)
    a = np.concatenate([edges, sample(np.dtype(dtype), seed=5)])    # past one vector's width
    with np.errstate(under="ignore"):
        want = a / np.asarray(n, dtype)
    got = a.copy()
    divide_array(got.view(np.uint8), code_of(np.dtype(dtype)), n)
    assert got.tobytes() == want.tobytes()
    # divided as it is copied (the shared segment's last pass): the same bits
    copied = np.full_like(a, 7)
    divide_array(copied.view(np.uint8), code_of(np.dtype(dtype)), n, a.view(np.uint8))
    assert copied.tobytes() == want.tobytes()


def test_float16_rounding_edges():
    """Sums that land between two halves round to even; overflow goes to inf."""
    h = np.float16
    cases = [(h(2048), h(1)), (h(2048), h(3)), (h(65504), h(65504)), (h(6e-8), h(6e-8)),
             (h(-0.0), h(0.0)), (h(1e-4), h(-1e-4))]
    for x, y in cases:
        got = np.array([x], h)
        reduce_arrays(got.view(np.uint8), np.array([y], h).view(np.uint8), code_of(np.dtype(h)), SUM)
        with np.errstate(over="ignore"):
            want = np.array([x], h) + np.array([y], h)
        assert got.tobytes() == want.tobytes(), (x, y, got, want)


def test_dtype_table():
    assert code_of(np.dtype(np.complex64)) == -1
    assert code_of(np.dtype(bool)) == -1
    assert "bfloat16" in supported_names() and "float32" in supported_names()
    for dt in ALL:
        assert size_of(code_of(dt)) == dt.itemsize


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("n", [8, 37, 1029])
def test_float16_vector_path_edges(op, n):
    """The 8-wide F16C path (where the CPU has it) and its scalar tail agree with NumPy bit for
    bit on subnormals, signed zeros, infinities, overflow and rounding ties."""
    h = np.float16
    edges = np.array([6e-8, -6e-8, 0.0, -0.0, np.inf, -np.inf, 65504, -65504, 2048, 3, 1e-4,
                      -1e-4, 0.5, 1.5, 2.5, 6.1e-5], h)
    rng = np.random.default_rng(n + op)
    a = rng.choice(edges, n).astype(h)
    b = rng.choice(edges, n).astype(h)
    with np.errstate(all="ignore"):
        # Min/Max: NumPy's answer, with -0 below +0 (minmax_rule: NumPy keeps its first argument).
        want = minmax_rule.pair(a, b, op) if op in (MIN, MAX) else OPS[op](a, b).astype(h)
        got = a.copy()
        reduce_arrays(got.view(np.uint8), b.view(np.uint8), code_of(np.dtype(h)), op)
    ok = (got.tobytes() == want.tobytes()) or (np.isnan(want).any() and np.array_equal(
        np.isnan(got), np.isnan(want)) and np.array_equal(got[~np.isnan(want)], want[~np.isnan(want)]))
    assert ok, (a[:8], b[:8], got[:8], want[:8])


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("n", [8, 37, 1029])
def test_bfloat16_vector_path_edges(op, n):
    """The 8-wide AVX2 bfloat16 path and its scalar tail agree with ml_dtypes bit for bit on
    rounding ties, subnormals, signed zeros, infinities and overflow."""
    edges = np.array([1.0, 1.00390625, 1.01171875, -1.00390625, 3.0e38, -3.0e38, 1e-39, -1e-39,
                      0.0, -0.0, np.inf, -np.inf, 255.5, 0.1, -2.5, 65504.0], np.float32).astype(BF16)
    rng = np.random.default_rng(100 + n + op)
    a = rng.choice(edges, n).astype(BF16)
    b = rng.choice(edges, n).astype(BF16)
    x, y = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(all="ignore"):
        want = minmax_rule.pair(a, b, op) if op in (MIN, MAX) else OPS[op](x, y).astype(BF16)
        got = a.copy()
        reduce_arrays(got.view(np.uint8), b.view(np.uint8), code_of(BF16), op)
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert got[~nan].tobytes() == want[~nan].tobytes(), (a[:8], b[:8], got[:8], want[:8])


def test_bfloat16_divide_vector_path():
    a = (np.random.default_rng(5).standard_normal(1037) * 1e3).astype(BF16)
    for d in (3, 7):
        got = a.copy()
        divide_array(got.view(np.uint8), code_of(BF16), d)
        assert got.tobytes() == (a.astype(np.float32) / np.float32(d)).astype(BF16).tobytes()


FLOATS = [BF16, np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)]


def special_sample(dtype, n, seed):
    """Mostly NaN, infinities and signed zeros, with some ordinary values and NaNs of other
    sign and payload, in every pairing (n covers the vector loops and their scalar tails)."""
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -1.5, 3.0], np.float64)
    rng = np.random.default_rng(seed)
    x = rng.choice(specials, n).astype(dtype)
    bits = x.view(minmax_rule.UINT[dtype.itemsize])
    odd_nan = rng.random(n) < 0.1          # a NaN with its lowest mantissa bit set too
    bits[odd_nan] = minmax_rule.default_nan(dtype).view(bits.dtype) | bits.dtype.type(1)
    return x


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", [MIN, MAX], ids=["Min", "Max"])
@pytest.mark.parametrize("n", [1, 7, 37, 1029])
def test_minmax_nan_and_signed_zeros(dtype, op, n):
    """NaN propagates as NumPy's minimum/maximum do, as the default quiet NaN; -0 is below +0;
    every other element is NumPy's answer bit for bit."""
    a, b = special_sample(dtype, n, 1 + n), special_sample(dtype, n, 2 + n)
    got = a.copy()
    reduce_arrays(got.view(np.uint8), b.view(np.uint8), code_of(dtype), op)
    want = minmax_rule.pair(a, b, op)
    assert got.tobytes() == want.tobytes(), (a[:8], b[:8], got[:8], want[:8])
    x, y = a.astype(np.float64), b.astype(np.float64)
    numpy = (np.minimum if op == MIN else np.maximum)(x, y)
    assert np.array_equal(np.isnan(got.astype(np.float64)), np.isnan(numpy))
    assert np.array_equal(got.astype(np.float64), numpy, equal_nan=True)
    nonzero = ~((x == 0) & (y == 0))
    assert np.array_equal(np.signbit(got.astype(np.float64))[nonzero & ~np.isnan(numpy)],
                          np.signbit(numpy)[nonzero & ~np.isnan(numpy)])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", [MIN, MAX], ids=["Min", "Max"])
def test_minmax_bits_do_not_depend_on_order(dtype, op):
    """kernel(a, b) and kernel(b, a) give the same bits, and so do all orders of three inputs:
    the property that lets every algorithm and MPI's own reduction agree."""
    n = 1029
    inputs = [special_sample(dtype, n, 10 + k) for k in range(3)]
    results = set()
    for order in itertools.permutations(range(3)):
        acc = inputs[order[0]].copy()
        for k in order[1:]:
            reduce_arrays(acc.view(np.uint8), inputs[k].view(np.uint8), code_of(dtype), op)
        results.add(acc.tobytes())
    pair = []
    for first, second in ((0, 1), (1, 0)):
        acc = inputs[first].copy()
        reduce_arrays(acc.view(np.uint8), inputs[second].view(np.uint8), code_of(dtype), op)
        pair.append(acc.tobytes())
    assert pair[0] == pair[1]
    assert len(results) == 1
    assert results.pop() == minmax_rule.reduce(inputs, op).tobytes()


# float32 buffers reduced as 16-bit floats (the fp16/bf16 compression on one node): each
# operand rounded as the cast rounds it, the 16-bit kernel's op, the result rounded and widened.
AS16 = {"float16": (DTYPES.index("float32 as float16"), np.dtype(np.float16)),
        "bfloat16": (DTYPES.index("float32 as bfloat16"), BF16)}


def _as16_sample(n, seed):
    """float32 values across the 16-bit types' ranges: normals, subnormals, overflow past
    float16's 65504, ties, zeros of both signs, infinities."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-9, 6, n)).astype(np.float32)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65520, -65519, 6e-8, 3e-8, 2049, 2051,
                      1 + 2 ** -11, 1 + 3 * 2 ** -11, 3.4e38, -1e-40], np.float32)
    x[: min(n, len(edges))] = edges[: min(n, len(edges))]
    return x


@pytest.mark.parametrize("wire", sorted(AS16))
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("n", [1, 7, 8, 9, 1037, 5003])
def test_float32_reduced_as_16_bits_is_the_casts_reduction(wire, op, n):
    """The kernel's result is the cast way's bit for bit: both operands cast to the 16-bit type
    (the compression's cast), the core's 16-bit kernel, the result cast back; in place and out
    of place, on the vector path and its tails, and again on its own output (a partial result
    rounds to itself, so a third rank's operand continues the same way)."""
    code, low = AS16[wire]
    a, b, c = _as16_sample(n, 1), _as16_sample(n, 2), _as16_sample(n, 3)
    with np.errstate(all="ignore"):
        a16, b16, c16 = a.astype(low), b.astype(low), c.astype(low)
    want = a16.copy()
    reduce_arrays(want.view(np.uint8), b16.view(np.uint8), code_of(low), op)
    got = a.copy()
    reduce_arrays(got.view(np.uint8), b.view(np.uint8), code, op)
    assert got.tobytes() == want.astype(np.float32).tobytes()
    out = np.full_like(a, 7)
    reduce_arrays_to(out.view(np.uint8), a.view(np.uint8), b.view(np.uint8), code, op)
    assert out.tobytes() == got.tobytes()
    reduce_arrays(want.view(np.uint8), c16.view(np.uint8), code_of(low), op)
    reduce_arrays(got.view(np.uint8), c.view(np.uint8), code, op)
    assert got.tobytes() == want.astype(np.float32).tobytes()


@pytest.mark.parametrize("wire", sorted(AS16))
@pytest.mark.parametrize("d", [2, 3, 4, 5, 8])
def test_float32_divided_as_16_bits_is_the_casts_division(wire, d):
    """Average's division: the 16-bit kernel's on the cast, cast back."""
    code, low = AS16[wire]
    a = _as16_sample(1037, 4)
    with np.errstate(all="ignore"):
        want = a.astype(low)
    divide_array(want.view(np.uint8), code_of(low), d)
    got = a.copy()
    divide_array(got.view(np.uint8), code, d)
    assert got.tobytes() == want.astype(np.float32).tobytes()


@pytest.mark.parametrize("wire", sorted(AS16))
def test_float32_reduced_as_16_bits_keeps_nans(wire):
    """A NaN operand (a vector block holding one goes the scalar way) gives NaN, and the other
    elements of its block keep the cast way's bits."""
    code, low = AS16[wire]
    a, b = _as16_sample(40, 5), _as16_sample(40, 6)
    a[3], b[17] = np.nan, np.nan
    with np.errstate(all="ignore"):
        want, b16 = a.astype(low), b.astype(low)
    reduce_arrays(want.view(np.uint8), b16.view(np.uint8), code_of(low), SUM)
    want = want.astype(np.float32)
    got = a.copy()
    reduce_arrays(got.view(np.uint8), b.view(np.uint8), code, SUM)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all() and nan[3] and nan[17]
    assert got[~nan].tobytes() == want[~nan].tobytes()


def test_the_16_bit_reductions_of_float32_are_not_array_dtypes():
    assert all(" as " not in n for n in supported_names())
    assert code_of(np.dtype(np.float32)) == DTYPES.index("float32")
    assert [size_of(AS16[w][0]) for w in sorted(AS16)] == [4, 4]


@pytest.mark.parametrize("level", [0, 1, 2])
def test_stream_copy_writes_every_byte_at_every_width(level):
    """The copy past the cache (kernels/stream.h) at each store width this CPU has: every
    destination offset within a line, lengths around the 4 KiB cut-over and the lines' tail,
    and nothing written outside [dst, dst + n); with a buffer to prefetch meanwhile, one line
    of it per line stored, and the buffer left as it was."""
    widest, _ = stream_copy_array(bytearray(1), b"x")
    if widest < level:
        pytest.skip(f"stores of level {level} are not on this CPU (or not x86-64)")
    rng = np.random.default_rng(level)
    for n in (0, 1, 4095, 4096, 4097, 5000, 65536 + 37, 200003):
        for off in (0, 1, 15, 16, 31, 33, 63):
            src = rng.integers(0, 256, n, np.uint8)
            buf = np.full(n + 192, 0xA5, np.uint8)
            dst = buf[64 + off:64 + off + n]
            ahead = rng.integers(0, 256, 8192 + off, np.uint8)
            kept = ahead.copy()
            ran, left = stream_copy_array(dst, src, level, ahead if off % 2 else None)
            assert ran == level
            assert np.array_equal(dst, src), (n, off)
            assert (buf[:64 + off] == 0xA5).all() and (buf[64 + off + n:] == 0xA5).all(), (n, off)
            if off % 2:
                assert np.array_equal(ahead, kept)
                lines = 0 if n < 4096 else (n - (-dst.ctypes.data) % 64) // 64   # stored whole
                assert left == len(ahead) - 64 * min(lines, len(ahead) // 64), (n, off, left)
    with pytest.raises(ValueError, match="differ in size"):
        stream_copy_array(bytearray(3), b"ab")

