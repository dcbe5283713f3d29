"""The fuzzer's plan, inputs and references, with no MPI in them: every rank draws the same plan
from a seed and rebuilds every other rank's input from (seed, op, part, rank), so the NumPy
reference needs no communication; the in-process tests run the checker on results known to be
right and on corrupted ones, so a checker that accepts anything is caught.

An op is a dict (printable, so a mismatch report can show it). Fills say what the values are:
  small    small integers (or powers of two for Product): exact in every dtype and order
  wide     full-range integers (Sum, Product wrap; Min, Max; Average without overflow), or for
           floats integers small enough that every partial sum is exact
  random   random floats: checked for closeness to a float64 reference, and for identical bits
           on every rank
  special  floats with NaN (any sign and payload), +-inf, +-0: Min and Max follow the rule of
           tests/minmax_rule.py, bit for bit
  bits     random bytes (NaN payloads included): data movement must keep every bit
"""
import hashlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import minmax_rule  # noqa: E402  (tests/minmax_rule.py)
from hvlite._core.codes import OPS as OP_CODES  # noqa: E402  (the core's op names, by value)

import ml_dtypes  # noqa: E402  (a test dependency)

BF16 = np.dtype(ml_dtypes.bfloat16)
# The core's dtype table (hvlite/_core/codes.h), in its order. NumPy's bool is not in it.
DTYPE_NAMES = ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "uint16",
               "int32", "uint32", "int64", "uint64"]
DTYPES = {name: (BF16 if name == "bfloat16" else np.dtype(name)) for name in DTYPE_NAMES}
FLOATS = ("float16", "bfloat16", "float32", "float64")
OP_NAMES = ["Sum", "Average", "Min", "Max", "Product"]     # drawn by index, in this order
# their hvlite.ReduceOp values (Horovod's: Adasum, which the fuzzer leaves out, sits among them)
SUM, AVERAGE, MIN, MAX, PRODUCT = OPS = tuple(OP_CODES.index(n) for n in OP_NAMES)
# (significand bits, machine epsilon, smallest subnormal)
PRECISION = {"float16": (11, 2.0 ** -10, 2.0 ** -24), "bfloat16": (8, 2.0 ** -7, 2.0 ** -133),
             "float32": (24, 2.0 ** -23, 2.0 ** -149), "float64": (53, 2.0 ** -52, 5e-324)}

KINDS = {"allreduce": 26, "allreduce_": 8, "grouped": 8, "allgather": 10, "broadcast": 8,
         "broadcast_": 4, "alltoall": 10, "reducescatter": 10, "barrier": 3,
         "broadcast_object": 2, "allgather_object": 2}
REDUCING = ("allreduce", "allreduce_", "grouped", "reducescatter")
POOL = 6            # names pool.0 .. pool.5 come back with other kinds, dtypes and shapes


# ---- the plan ---------------------------------------------------------------------------------

def _pick(rng, weights):
    keys = list(weights)
    p = np.array([weights[k] for k in keys], float)
    return keys[int(rng.choice(len(keys), p=p / p.sum()))]


def _tail(rng):
    """Trailing dimensions: none, zero, odd, several."""
    return [(), (), (1,), (3,), (0,), (2, 3), (5,), (1, 2)][int(rng.integers(8))]


def _shape(rng, scalar_ok):
    r = rng.random()
    if r < 0.04 and scalar_ok:
        return ()
    if r < 0.10:
        return (0,)
    if r < 0.18:
        return (1,)
    if r < 0.45:
        return (int(rng.integers(1, 50)) * 2 + 1,)          # odd
    if r < 0.60:
        return (int(rng.integers(2, 400)),)
    if r < 0.66:
        return [(3, 0), (0, 4), (2, 0, 3)][int(rng.integers(3))]
    if r < 0.82:
        return tuple(int(v) for v in rng.integers(1, 8, size=2))
    if r < 0.96:
        return tuple(int(v) for v in rng.integers(1, 6, size=3))
    return (int(rng.choice([1031, 65537, 70001, 140003])),)  # straddles segments


def _fill(rng, dtype, op):
    """How to fill a reduction's inputs (see the module docstring)."""
    fl = dtype in FLOATS
    r = rng.random()
    if op in (MIN, MAX):
        if fl:
            return "special" if r < 0.6 else ("random" if r < 0.8 else "small")
        return "wide" if r < 0.5 else "small"
    if r < 0.65:
        return "small"
    if r < 0.85 or not fl:
        return "wide" if not (fl and op == PRODUCT) else "small"
    return "random"


def _name(rng, i, seed, s, used):
    """None or "" (automatic names), a name from the pool (at most once per set in a batch: a
    name in flight may not be submitted again, but the same name on two sets is two tensors),
    or a name of this op's own."""
    r = rng.random()
    if r < 0.35:
        return None
    if r < 0.40:
        return ""
    if r < 0.70:
        k = int(rng.integers(POOL))
        if (s, k) not in used:
            used.add((s, k))
            return f"pool.{k}"
    return f"fz.{seed}.{i}"


def _layout(rng, inplace):
    r = rng.random()
    if inplace:
        return "strided" if r < 0.2 else "c"
    return "c" if r < 0.7 else ("strided" if r < 0.8 else ("fortran" if r < 0.9 else "readonly"))


def draw_op(rng, i, seed, sets, algorithms, used):
    """One op of the plan: kind, process set (an index into `sets`), sync, async or drop (an
    async handle never synchronized), name, and what its inputs are (drawn for every rank of
    its set)."""
    kind = _pick(rng, KINDS)
    s = int(rng.choice(len(sets))) if rng.random() < 0.35 else 0
    m = len(sets[s])
    r = rng.random()
    op = {"i": i, "kind": kind, "set": s,
          "mode": "sync" if r < 0.35 else ("drop" if r < 0.38 else "async"),
          "name": _name(rng, i, seed, s, used) if kind != "barrier" else None}
    if kind in REDUCING:
        op["op"] = OPS[int(rng.integers(5))]
    if kind in ("allreduce", "allreduce_", "grouped"):
        op["algorithm"] = algorithms[int(rng.integers(len(algorithms)))]
    if kind == "grouped":
        k = 0 if rng.random() < 0.03 else int(rng.integers(1, 5))
        op["parts"] = []
        for _ in range(k):
            dt = DTYPE_NAMES[int(rng.integers(12))]
            op["parts"].append({"dtype": dt, "shape": _shape(rng, True),
                                "fill": _fill(rng, dt, op["op"]), "layout": _layout(rng, False)})
        return op
    if kind == "barrier":
        return op
    if kind in ("broadcast_object", "allgather_object"):
        if kind == "broadcast_object":
            op["root"] = int(rng.choice(sets[s]))
        return op
    dt = DTYPE_NAMES[int(rng.integers(12))]
    op["dtype"] = dt
    op["layout"] = _layout(rng, kind in ("allreduce_", "broadcast_"))
    if kind == "broadcast_":
        op["layout"] = "c"      # broadcast_ takes C-contiguous arrays only
    if kind in ("allreduce", "allreduce_"):
        op["shape"] = _shape(rng, True)
        op["fill"] = _fill(rng, dt, op["op"])
    elif kind == "reducescatter":
        op["shape"] = (int(rng.integers(0, 2 * m + 4)),) + _tail(rng)
        op["fill"] = _fill(rng, dt, op["op"])
    elif kind in ("broadcast", "broadcast_"):
        op["shape"] = _shape(rng, True)
        op["root"] = int(rng.choice(sets[s]))
        op["fill"] = "bits" if rng.random() < 0.7 else "small"
    elif kind == "allgather":
        op["rows"] = [int(v) for v in rng.integers(0, 7, size=m)]
        op["tail"] = _tail(rng)
        op["fill"] = "bits" if rng.random() < 0.7 else "small"
    elif kind == "alltoall":
        op["tail"] = _tail(rng)
        op["fill"] = "bits" if rng.random() < 0.7 else "small"
        if rng.random() < 0.3:          # no splits: equal parts, so rows a multiple of m
            op["rows"] = [m * int(v) for v in rng.integers(0, 4, size=m)]
            op["splits"] = None
        else:
            op["rows"] = [int(v) for v in rng.integers(0, 10, size=m)]
            op["splits"] = [[int(v) for v in rng.multinomial(rows, np.ones(m) / m)]
                            for rows in op["rows"]]
    return op


def draw_plan(seed, count, sets, algorithms):
    """The same list of batches (lists of ops) on every rank: a seed's whole sequence. Batches
    hold 1-8 ops, sometimes up to 32 (many handles in flight at once, fused together). A pool
    name whose handle was dropped is not drawn again in the seed."""
    rng = np.random.default_rng([seed, 0xF022])
    batches, i = [], 0
    dropped = set()     # (set, k) of pool names whose handles were dropped: maybe still in flight
    while i < count:
        used, batch = set(dropped), []
        size = int(rng.integers(1, 9)) if rng.random() < 0.9 else int(rng.integers(9, 33))
        for _ in range(min(count - i, size)):
            op = draw_op(rng, i, seed, sets, algorithms, used)
            if op["mode"] == "drop" and (op["name"] or "").startswith("pool."):
                # nothing tells this rank when a dropped request completes, and submitting its
                # name again before then is refused (Horovod's rule): the name is not drawn again
                dropped.add((op["set"], int(op["name"][5:])))
            batch.append(op)
            i += 1
        batches.append(batch)
    return batches


def describe(op, sets):
    """A one-line description of an op, enough to see what went wrong."""
    skip = {"i", "kind", "set"}
    rest = " ".join(f"{k}={OP_CODES[v] if k == 'op' else v!r}" for k, v in op.items()
                    if k not in skip)
    where = "the global set" if op["set"] == 0 else f"set {sets[op['set']]}"
    return f"op {op['i']} {op['kind']} on {where} {rest}"


# ---- inputs -----------------------------------------------------------------------------------

def _values(rng, dtype_name, fill, op, shape, m):
    dtype = DTYPES[dtype_name]
    count = int(np.prod(shape))
    fl = dtype_name in FLOATS
    if fill == "bits":
        return rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8) \
                  .view(dtype).reshape(shape)
    if fill == "special":
        specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0], np.float64)
        x = np.where(rng.random(count) < 0.6, rng.choice(specials, count),
                     rng.integers(-50, 50, size=count).astype(np.float64)).astype(dtype)
        uint = minmax_rule.UINT[dtype.itemsize]
        odd = np.isnan(x) & (rng.random(count) < 0.3)      # NaNs with another payload
        x.view(uint)[odd] |= uint(3)
        return x.reshape(shape)
    if fill == "random":
        if op == PRODUCT:
            mag = rng.uniform(0.5, 2.0, size=count)
        else:
            mag = rng.uniform(-1, 1, size=count)
            if dtype_name in ("float32", "float64"):
                mag *= 2.0 ** rng.integers(-20, 21, size=count)
        sign = np.where(rng.random(count) < 0.5, -1.0, 1.0) if op == PRODUCT else 1.0
        return (mag * sign).astype(dtype).reshape(shape)
    unsigned = not fl and np.issubdtype(dtype, np.unsignedinteger)
    if fill == "small":
        if op == PRODUCT:
            choice = [1, 2] if unsigned else ([-2, -1, -0.5, 0.5, 1, 2] if fl else [-2, -1, 1, 2])
            vals = rng.choice(choice, size=count)
        elif op in (MIN, MAX):
            vals = rng.integers(0 if unsigned else -100, 100, size=count)
        else:
            vals = rng.integers(0 if unsigned else -3, 4, size=count)
        return np.asarray(vals, np.float64).astype(dtype).reshape(shape) if fl else \
            np.asarray(vals).astype(dtype).reshape(shape)
    # wide
    if fl:      # integers whose every partial sum over m ranks is exact
        lim = 2 ** PRECISION[dtype_name][0] // m
        vals = rng.integers(-lim, lim + 1, size=count).astype(np.float64)
        return vals.astype(dtype).reshape(shape)
    info = np.iinfo(dtype)
    if op == AVERAGE:       # no overflow: Average of a wrapped sum is not what anyone means
        lo, hi = (0, info.max // m) if unsigned else (-(info.max // m), info.max // m)
        return rng.integers(lo, hi, size=count, dtype=dtype, endpoint=True).reshape(shape)
    return rng.integers(info.min, info.max, size=count, dtype=dtype, endpoint=True).reshape(shape)


def rank_input(seed, op, rank, part=0, sets=None):
    """Rank `rank`'s input to `op` (a global rank; its position in the set picks its rows)."""
    rng = np.random.default_rng([seed, op["i"], part, rank])
    if op["kind"] == "grouped":
        p = op["parts"][part]
        return _values(rng, p["dtype"], p["fill"], op["op"], p["shape"], _m(op, sets))
    shape = op.get("shape")
    if op["kind"] in ("allgather", "alltoall"):
        shape = (op["rows"][sets[op["set"]].index(rank)],) + tuple(op["tail"])
    return _values(rng, op["dtype"], op["fill"], op.get("op", SUM), shape, _m(op, sets))


def rank_object(seed, op, rank):
    rng = np.random.default_rng([seed, op["i"], 7, rank])
    size = int(rng.integers(0, 40))
    return {"rank": rank, "op": op["i"], "data": [int(v) for v in rng.integers(-9, 9, size)],
            "text": "x" * (size % 11), "blob": rng.bytes(size)}


def _m(op, sets):
    return len(sets[op["set"]]) if sets is not None else 1


def layout(x, how):
    """The same values in a memory layout the API accepts: C order, a strided view, Fortran
    order, a read-only array."""
    if how == "strided" and x.ndim >= 1:
        buf = np.zeros((x.shape[0] * 2,) + x.shape[1:], x.dtype)
        buf[::2] = x
        return buf[::2]
    if how == "fortran" and x.ndim >= 2:     # (NumPy makes a 0-d array 1-d here)
        return np.asfortranarray(x)
    if how == "readonly":
        y = x.copy()
        y.flags.writeable = False
        return y
    return x.copy()


# ---- references -------------------------------------------------------------------------------

def _wrapping(stack, dtype, op):
    """Integer Sum or Product that wraps, computed on the unsigned view (defined behaviour)."""
    u = np.dtype(f"u{dtype.itemsize}")
    s = stack.view(u)
    out = s.prod(axis=0, dtype=u) if op == PRODUCT else s.sum(axis=0, dtype=u)
    return np.asarray(out, u).view(dtype)


def reduction(inputs, dtype_name, op, fill):
    """(want, tolerance): the reduction of the set's inputs; tolerance None means bit for bit,
    else an array bounding |got - want| elementwise, want then being float64."""
    want, tol = _reduction(inputs, dtype_name, op, fill)
    return np.asarray(want), (None if tol is None else np.asarray(tol))   # 0-d stays an array


def _reduction(inputs, dtype_name, op, fill):
    dtype = DTYPES[dtype_name]
    m = len(inputs)
    shape = inputs[0].shape
    stack = np.stack([np.ascontiguousarray(x) for x in inputs]).reshape((m,) + shape)
    fl = dtype_name in FLOATS
    if op in (MIN, MAX):
        if fl:
            # the rule of tests/minmax_rule.py; one rank's input comes back as it is (NumPy's
            # reduction of one array), NaN payload included
            return minmax_rule.reduce(list(stack), op).reshape(shape), None
        return (stack.min(axis=0) if op == MIN else stack.max(axis=0)).astype(dtype), None
    if fl and fill == "random":
        wide = stack.astype(np.float64)
        _, eps, tiny = PRECISION[dtype_name]
        if op == PRODUCT:
            want = wide.prod(axis=0)
            return want, 2 * (m + 1) * eps * np.abs(want) + m * tiny
        want = wide.sum(axis=0)
        tol = (m + 1) * eps * np.abs(wide).sum(axis=0) + m * tiny
        if op == AVERAGE:
            want = want / m
            tol = tol / m + eps * np.abs(want)
        return want, tol
    if fl:      # exact inputs: float64 is exact, then one rounding of the quotient in the dtype
        total = (stack.astype(np.float64).prod(axis=0) if op == PRODUCT else
                 stack.astype(np.float64).sum(axis=0)).astype(dtype)
        if op == AVERAGE:
            total = (total / np.asarray(m, dtype=dtype)).astype(dtype)
        return np.asarray(total, dtype).reshape(shape), None
    if op == AVERAGE:       # inputs never overflow the sum: truncate it toward zero
        unsigned = np.issubdtype(dtype, np.unsignedinteger)
        total = stack.astype(np.uint64 if unsigned else np.int64).sum(axis=0)
        q = total // m if unsigned else np.sign(total) * (np.abs(total) // m)
        return np.asarray(q).astype(dtype).reshape(shape), None
    return _wrapping(stack, dtype, op).reshape(shape), None


def block(rows, m, p):
    """reducescatter's rows for the set's p-th rank: [start, stop)."""
    start = rows // m * p + min(p, rows % m)
    return start, start + rows // m + (1 if p < rows % m else 0)


def expected(seed, op, sets, me):
    """What rank `me` (global) must get from `op`: a list of (what, want, tolerance, dtype)
    parts, or for objects and barrier the value itself."""
    ranks = sets[op["set"]]
    m, p = len(ranks), ranks.index(me)
    kind = op["kind"]
    if kind == "barrier":
        return None
    if kind == "broadcast_object":
        return rank_object(seed, op, op["root"])
    if kind == "allgather_object":
        return [rank_object(seed, op, r) for r in ranks]
    if kind == "grouped":
        out = []
        for j, part in enumerate(op["parts"]):
            inputs = [rank_input(seed, op, r, j, sets) for r in ranks]
            out.append((f"part {j}",) + reduction(inputs, part["dtype"], op["op"], part["fill"])
                       + (DTYPES[part["dtype"]],))
        return out
    inputs = [rank_input(seed, op, r, 0, sets) for r in ranks]
    dtype = DTYPES[op["dtype"]]
    if kind in ("allreduce", "allreduce_"):
        return [("result",) + reduction(inputs, op["dtype"], op["op"], op["fill"]) + (dtype,)]
    if kind == "reducescatter":
        want, tol = reduction(inputs, op["dtype"], op["op"], op["fill"])
        a, b = block(op["shape"][0], m, p)
        return [("block", want[a:b], None if tol is None else tol[a:b], dtype)]
    if kind in ("broadcast", "broadcast_"):
        return [("result", inputs[ranks.index(op["root"])], None, dtype)]
    if kind == "allgather":
        return [("result", np.concatenate(inputs), None, dtype)]
    if kind == "alltoall":
        got = []
        for s in range(m):
            sp = op["splits"][s] if op["splits"] is not None else [op["rows"][s] // m] * m
            start = int(sum(sp[:p]))
            got.append(inputs[s][start:start + sp[p]])
        rows = np.concatenate(got)
        if op["splits"] is None:
            return [("rows", rows, None, dtype)]
        received = np.array([op["splits"][s][p] for s in range(m)], np.int64)
        return [("rows", rows, None, dtype), ("received splits", received, None, received.dtype)]
    raise ValueError(kind)


def _show(values):
    """Values with their bits (NaNs and signed zeros differ only there)."""
    u = np.dtype(f"u{values.dtype.itemsize}")
    return ", ".join(f"{v}(0x{b:0{2 * u.itemsize}x})" for v, b in zip(values.tolist(),
                                                                     values.view(u).tolist()))


def _compare(what, got, want, tol, dtype):
    if not isinstance(got, np.ndarray):
        return [f"{what}: got a {type(got).__name__}, want an array"]
    if got.dtype != dtype or got.shape != want.shape:
        return [f"{what}: got {got.dtype}{list(got.shape)}, want {dtype}{list(want.shape)}"]
    if tol is None:
        if np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes():
            return []
        uint = np.dtype(f"u{want.dtype.itemsize}") if want.dtype.itemsize in (1, 2, 4, 8) else None
        flat_g = np.ascontiguousarray(got).reshape(-1)
        flat_w = np.ascontiguousarray(want).reshape(-1)
        diff = np.flatnonzero(flat_g.view(uint) != flat_w.view(uint))
        return [f"{what}: {diff.size} of {want.size} elements differ bitwise, first at "
                f"{diff[:3].tolist()}: got {_show(flat_g[diff[:3]])} "
                f"want {_show(flat_w[diff[:3]])}"]
    g = got.astype(np.float64)
    bad = np.flatnonzero(~(np.abs(g - want) <= tol))
    if bad.size:
        g, w, t = g.reshape(-1), want.reshape(-1), tol.reshape(-1)
        return [f"{what}: {bad.size} of {want.size} elements off the float64 reference, first at "
                f"{bad[:3].tolist()}: got {g[bad[:3]].tolist()} want {w[bad[:3]].tolist()} "
                f"+- {t[bad[:3]].tolist()}"]
    return []


def check(seed, op, sets, me, got):
    """Problems with rank `me`'s result `got` of `op` (empty when right). For alltoall with
    splits `got` is (rows, received_splits), for grouped the list of parts."""
    want = expected(seed, op, sets, me)
    kind = op["kind"]
    if kind == "barrier":
        return [] if got is None else [f"barrier returned {got!r}"]
    if kind in ("broadcast_object", "allgather_object"):
        return [] if got == want else [f"got {got!r:.200}, want {want!r:.200}"]
    if kind == "grouped":
        if not isinstance(got, list) or len(got) != len(want):
            return [f"got {type(got).__name__} of {len(got) if hasattr(got, '__len__') else '?'} "
                    f"parts, want a list of {len(want)}"]
        parts = got
    elif kind == "alltoall" and op["splits"] is not None:
        if not isinstance(got, tuple) or len(got) != 2:
            return [f"got {type(got).__name__}, want (rows, received_splits)"]
        parts = list(got)
    else:
        parts = [got]
    problems = []
    for g, (what, w, tol, dtype) in zip(parts, want):
        problems += _compare(what, g, w, tol, dtype)
    return problems


def digest(got):
    """Result bits, dtype and shape, to compare across ranks."""
    h = hashlib.sha1()
    for a in (got if isinstance(got, list) else [got]):
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def same_everywhere(op):
    """Whether every rank of the set must hold the same bits (not so for alltoall's and
    reducescatter's own rows, nor barrier's and the objects' non-arrays)."""
    return op["kind"] in ("allreduce", "allreduce_", "grouped", "allgather", "broadcast",
                          "broadcast_")


def cross_rank_problems(gathered, sets, ops_by_index):
    """gathered: every rank's {op index: digest}. Problems for ops whose set members hold
    different bits."""
    problems = []
    for i, op in sorted(ops_by_index.items()):
        seen = {r: d[i] for r, d in enumerate(gathered) if i in d}
        if len(set(seen.values())) > 1:
            problems.append((i, f"ranks hold different bits: "
                                f"{ {r: h[:10] for r, h in seen.items()} }"))
    return problems


def corrupt(op, got):
    """A copy of a right result with one thing wrong (one element's bits, else a shape, a
    received split, an extra part): what every check must catch."""
    kind = op["kind"]
    if kind == "barrier":
        return 0
    if kind == "broadcast_object":
        return dict(got, rank=-1)
    if kind == "allgather_object":
        return list(got) + [None]
    parts = list(got) if isinstance(got, (list, tuple)) else [got]
    parts = [np.array(a, copy=True) for a in parts]
    for a in parts:
        if a.size:
            flat = a.reshape(-1)
            if a.dtype.name in FLOATS:
                with np.errstate(invalid="ignore"):     # a NaN into bfloat16 warns
                    flat[0] = 1.0 if np.isnan(flat[:1].astype(np.float64))[0] else np.nan
            else:
                flat.view(np.dtype(f"u{a.dtype.itemsize}"))[0] ^= 1
            break
    else:
        if kind == "grouped":
            parts.append(np.zeros(1))
        else:
            parts[0] = np.zeros((parts[0].shape[0] + 1,) + parts[0].shape[1:], parts[0].dtype)
    if isinstance(got, tuple):
        return tuple(parts)
    return parts if isinstance(got, list) else parts[0]


def right_result(seed, op, sets, me):
    """A result the checker must accept: the reference itself, rounded to the op's dtype where
    it is a float64 one, in the shape each kind returns."""
    want = expected(seed, op, sets, me)
    if op["kind"] in ("barrier", "broadcast_object", "allgather_object"):
        return want
    parts = [w.astype(dtype) if tol is not None else w for _, w, tol, dtype in want]
    if op["kind"] == "grouped":
        return parts
    if op["kind"] == "alltoall" and op["splits"] is not None:
        return tuple(parts)
    return parts[0]
