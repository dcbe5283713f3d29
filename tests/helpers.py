"""Rank-side helpers: deterministic inputs every rank can rebuild for every other rank (so the
NumPy reference needs no communication), and collective assertions that fail on every rank at
once (so one rank's failure never leaves the others waiting in the next collective)."""
import hashlib

import numpy as np
from mpi4py import MPI

import hvlite as hvd

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a test dependency
    BF16 = None

DTYPES = [np.dtype(d) for d in ("float16", "float32", "float64", "int8", "uint8", "int16",
                                "uint16", "int32", "uint32", "int64", "uint64")]
if BF16 is not None:
    DTYPES.insert(1, BF16)
OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]


def is_float(dt):
    return dt == BF16 or np.issubdtype(dt, np.floating)


def rank_input(rank, count, dtype, op, seed=0):
    """Values whose reduction is exact in every dtype, so any reduction order gives the same bits."""
    rng = np.random.default_rng([seed, rank, count, DTYPES.index(dtype), int(op)])
    unsigned = not is_float(dtype) and np.issubdtype(dtype, np.unsignedinteger)
    if op == hvd.Product:
        vals = rng.choice([1, 2] if unsigned else [-2, -1, 1, 2], size=count)
    elif op in (hvd.Min, hvd.Max):
        vals = rng.integers(0 if unsigned else -100, 100, size=count)
    else:
        vals = rng.integers(0 if unsigned else -3, 4, size=count)
    return vals.astype(np.float64).astype(dtype) if is_float(dtype) else vals.astype(dtype)


def reference(inputs, dtype, op, n):
    """NumPy's answer on the gathered inputs (integer arithmetic wraps, as in the core)."""
    stack = np.stack(inputs) if inputs[0].size else np.zeros((n, 0), dtype)
    if op in (hvd.Min, hvd.Max):
        return (stack.min(axis=0) if op == hvd.Min else stack.max(axis=0)).astype(dtype)
    if is_float(dtype):
        wide = stack.astype(np.float64)
        total = (wide.prod(axis=0) if op == hvd.Product else wide.sum(axis=0)).astype(dtype)
        if op == hvd.Average:
            total = (total / np.asarray(n, dtype=dtype)).astype(dtype)
        return total
    total = stack.prod(axis=0, dtype=dtype) if op == hvd.Product else stack.sum(axis=0, dtype=dtype)
    if op == hvd.Average:
        wide = total.astype(np.int64) if dtype != np.uint64 else total
        q = np.abs(wide) // n if dtype != np.uint64 else wide // n
        total = (np.sign(wide) * q if dtype != np.uint64 else q).astype(dtype)
    return total


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def digest(a):
    return hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()


def assert_everywhere(failures, comm=MPI.COMM_WORLD):
    """Collective: raise AssertionError on every rank if any rank has failures (listing them all)."""
    everyone = comm.allgather(list(failures))
    bad = [f"rank {r}: {msg}" for r, msgs in enumerate(everyone) for msg in msgs[:10]]
    assert not bad, "\n".join(bad)


def assert_identical_everywhere(arr, what, comm=MPI.COMM_WORLD):
    digests = comm.allgather(digest(arr))
    assert len(set(digests)) == 1, f"{what}: results differ across ranks: {digests}"


def expect_raise_everywhere(fn, exc_type, *fragments, comm=MPI.COMM_WORLD):
    """Collective: fn() must raise exc_type on every rank, its message containing each fragment."""
    failures = []
    try:
        fn()
        failures.append(f"no exception (expected {exc_type.__name__})")
    except exc_type as e:
        msg = str(e)
        failures += [f"message {msg!r} lacks {frag!r}" for frag in fragments if frag not in msg]
    except Exception as e:  # noqa: BLE001 - report the wrong kind
        failures.append(f"raised {type(e).__name__}: {e} (expected {exc_type.__name__})")
    assert_everywhere(failures, comm)


# ---- Adasum -----------------------------------------------------------------------------------

def adasum_pair(a, b):
    """adasum(a, b) = (1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b, a zero vector without its
    correction term; float64 throughout, rounded once to the dtype (16-bit floats through
    float32), as the core rounds."""
    dtype = a.dtype
    x, y = a.astype(np.float64), b.astype(np.float64)
    dot, aa, bb = float(np.dot(x, y)), float(np.dot(x, x)), float(np.dot(y, y))
    ca = 1.0 - dot / (2.0 * aa) if aa > 0 else 1.0
    cb = 1.0 - dot / (2.0 * bb) if bb > 0 else 1.0
    out = ca * x + cb * y
    if dtype.itemsize == 2:
        return out.astype(np.float32).astype(dtype)
    return out.astype(dtype)


def adasum_reference(inputs):
    """Adasum of every rank's vector, paired as the core pairs them: of the first 2(N-p) ranks
    (p the largest power of two <= N) each even rank's vector combines with the next one's
    first, then the p vectors left combine as a binary tree in rank order, (0,1), (2,3), ...
    then the pairs' results, and so on; each level rounded to the dtype."""
    n = len(inputs)
    p = 1 << (n.bit_length() - 1)
    rem = n - p
    flat = [np.asarray(v).reshape(-1) for v in inputs]
    level = [adasum_pair(flat[2 * i], flat[2 * i + 1]) for i in range(rem)] + flat[2 * rem:]
    while len(level) > 1:
        level = [adasum_pair(level[2 * i], level[2 * i + 1]) for i in range(len(level) // 2)]
    return level[0].reshape(np.shape(inputs[0]))


def adasum_close(got, want, levels):
    """Close to the reference within what float64 dot products summed in another order can
    move: a rounding step of the dtype per level, relative to the largest magnitude."""
    if got.size == 0:
        return True
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not (np.isfinite(g).all() and np.isfinite(w).all()):
        return False
    eps = float(np.finfo(np.float32).eps) * 2 ** 16 if got.dtype == BF16 else \
        float(np.finfo(got.dtype).eps)
    scale = max(float(np.abs(w).max()), 1e-300)
    return float(np.abs(g - w).max()) <= 4 * (levels + 1) * eps * scale
