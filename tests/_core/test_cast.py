"""The core's float32 <-> float16/bfloat16 casts give NumPy's (float16) and ml_dtypes' (bfloat16)
bits exactly, on the vector path and the scalar one, specials and odd sizes included. No MPI."""
import pathlib
import platform

import numpy as np
import pytest

from hvlite._core.kernels.cast import cast_into, simd

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
WIRES = [np.dtype(np.float16), BF16]
PATHS = [pytest.param(True, id="simd"), pytest.param(False, id="scalar")]
# Mantissas that sit on each rounding edge of both 16-bit formats (ties, one above, one below),
# and NaN payloads that vanish or survive the narrowing.
MANTISSAS = [0, 1, 0x7fffff, 0x400000, 0x200000, 0x1000, 0x1001, 0x0fff, 0x2000, 0x3000, 0x3001,
             0x8000, 0x8001, 0x7fff, 0x18000, 0x17fff, 0x10000, 0x3fe000, 0x7fe000, 0x7ff000,
             0x200, 0x400, 0x7ff, 0x800, 0x1400]


def specials():
    """Every exponent (zeros, subnormals, half's subnormal range, overflow, Inf, NaN) with every
    edge mantissa, both signs, as float32."""
    e = np.arange(256, dtype=np.uint32)[:, None] << 23
    m = np.array(MANTISSAS, dtype=np.uint32)[None, :]
    bits = (e | m).ravel()
    return np.concatenate([bits, bits | 0x80000000]).view(np.float32)


def reference(x, dtype):
    with np.errstate(all="ignore"):
        return x.astype(dtype)


def bits(a):
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def narrowed(x, dtype, vec):
    return cast_into(x, np.empty(x.shape, dtype), simd=vec)


def assert_same_bits(got, want):
    diff = np.flatnonzero(bits(got) != bits(want))
    assert diff.size == 0, (f"{diff.size} of {got.size} differ; first at {diff[0]}: "
                            f"got {bits(got)[diff[0]]:#x}, want {bits(want)[diff[0]]:#x}")


def mixed(n, seed=0):
    """Specials shuffled among random bit patterns and gradient-like values, so NaN lands inside
    vector blocks as well as in the tail."""
    rng = np.random.default_rng(seed)
    random_bits = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    parts = [specials(), random_bits.view(np.float32)]
    for scale in (1.0, 1e-5, 1e-8, 7e4):
        parts.append((rng.standard_normal(n) * scale).astype(np.float32))
    x = np.concatenate(parts)
    return x[rng.permutation(x.size)]


@pytest.mark.parametrize("vec", PATHS)
@pytest.mark.parametrize("dtype", WIRES, ids=["float16", "bfloat16"])
def test_narrowing_matches_numpy_bit_for_bit(dtype, vec):
    x = mixed(20_000)
    assert_same_bits(narrowed(x, dtype, vec), reference(x, dtype))


@pytest.mark.parametrize("vec", PATHS)
@pytest.mark.parametrize("dtype", WIRES, ids=["float16", "bfloat16"])
def test_widening_every_16_bit_pattern(dtype, vec):
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    out = cast_into(h, np.empty(h.size, np.float32), simd=vec)
    assert_same_bits(out, h.astype(np.float32))


@pytest.mark.parametrize("vec", PATHS)
@pytest.mark.parametrize("dtype", WIRES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 17, 1023])
@pytest.mark.parametrize("shift", [0, 1])
def test_sizes_and_unaligned_starts(dtype, vec, n, shift):
    x = mixed(200, seed=n)[shift:shift + n]
    out = np.empty(n + 1, dtype)[1:]                      # a 2-byte aligned, unaligned-to-16 start
    cast_into(x, out, simd=vec)
    assert_same_bits(out, reference(x, dtype))
    back = np.empty(n + shift, np.float32)[shift:]
    cast_into(out, back, simd=vec)
    assert_same_bits(back, out.astype(np.float32))


@pytest.mark.parametrize("dtype", WIRES, ids=["float16", "bfloat16"])
def test_large_arrays_cast_without_the_gil_alike(dtype):
    x = mixed((1 << 18) // 5 + 11)
    assert x.size > 1 << 18
    assert_same_bits(narrowed(x, dtype, True), reference(x, dtype))


def test_shapes_are_kept_and_dst_is_returned():
    x = mixed(100)[:600].reshape(20, 30)
    out = np.empty((20, 30), np.float16)
    assert cast_into(x, out) is out
    assert_same_bits(out, reference(x, np.float16))


def test_flush_denormal_mode_changes_nothing():
    """torch.set_flush_denormal sets MXCSR's DAZ/FTZ: the F16C path must still give NumPy's bits."""
    torch = pytest.importorskip("torch")
    x = mixed(5000)
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-denormal mode")
    try:
        got = [narrowed(x, d, True) for d in WIRES]
        h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
        wide = cast_into(h, np.empty(h.size, np.float32))
    finally:
        torch.set_flush_denormal(False)
    for g, d in zip(got, WIRES):
        assert_same_bits(g, reference(x, d))
    assert_same_bits(wide, h.astype(np.float32))


def test_the_vector_path_exists_where_the_cpu_has_f16c():
    """So the simd-parametrised tests above test the vector code on such a machine."""
    info = pathlib.Path("/proc/cpuinfo")
    if platform.machine() != "x86_64" or not info.exists():
        pytest.skip("not an x86-64 Linux machine")
    flags = set(info.read_text().split())
    assert simd() == ({"f16c", "avx2"} <= flags)


@pytest.mark.parametrize("src, dst, error", [
    (np.zeros(4, np.float64), np.zeros(4, np.float16), TypeError),
    (np.zeros(4, np.float16), np.zeros(4, np.float16), TypeError),
    (np.zeros(4, np.float32), np.zeros(5, np.float16), ValueError),
    (np.zeros(8, np.float32)[::2], np.zeros(4, np.float16), ValueError),
    (np.zeros(4, np.float32), np.zeros(8, np.float16)[::2], ValueError),
])
def test_bad_arguments_are_refused(src, dst, error):
    with pytest.raises(error):
        cast_into(src, dst)


def test_read_only_and_overlapping_destinations_are_refused():
    x = np.zeros(8, np.float32)
    ro = np.zeros(8, np.float16)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        cast_into(x, ro)
    with pytest.raises(ValueError, match="overlap"):
        cast_into(x, x.view(np.float16)[:8])
    with pytest.raises(TypeError):
        cast_into([1.0], np.zeros(1, np.float16))
