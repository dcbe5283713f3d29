"""Rank side: every collective of hvlite.torch under Horovod's names, against NumPy references
rebuilt on every rank, and its gradient against the analytic one."""
import warnings

import numpy as np
import pytest
from mpi4py import MPI

torch = pytest.importorskip("torch")
import hvlite.torch as hvd  # noqa: E402
from hvlite.errors import DuplicateNameError  # noqa: E402
from hvlite.torch import _bridge  # noqa: E402
from helpers import (BF16, adasum_close, adasum_reference, assert_everywhere,  # noqa: E402
                     assert_identical_everywhere,
                     expect_raise_everywhere, rank_input, reference)

hvd.init()
N, RANK = hvd.size(), hvd.rank()
TORCH_OF = {np.dtype(d): getattr(torch, d) for d in
            ("uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")}
TORCH_OF[BF16] = torch.bfloat16


def as_tensor(a):
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def as_numpy(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    return t.numpy()


def same(t, a):
    got = as_numpy(t)
    return got.shape == a.shape and got.dtype == a.dtype and got.tobytes() == a.tobytes()


def test_basics():
    fails = []
    if not (hvd.is_initialized() and hvd.mpi_built() and hvd.mpi_enabled()):
        fails.append("mpi_built/enabled/is_initialized")
    if any(f() for f in (hvd.gloo_built, hvd.gloo_enabled, hvd.nccl_built, hvd.ddl_built,
                         hvd.ccl_built, hvd.rocm_built)):
        fails.append("a backend hvlite lacks claims to be built")
    import importlib.util
    if hvd.cuda_built() != (bool(torch.version.cuda) and bool(importlib.util.find_spec("cupy"))):
        fails.append("cuda_built is not 'CUDA torch and CuPy are here'")
    if (hvd.rank(), hvd.size()) != (RANK, N) or hvd.local_size() * hvd.cross_size() != N:
        fails.append("rank/size/local/cross")
    if not isinstance(hvd.mpi_threads_supported(), bool):
        fails.append("mpi_threads_supported")
    if hvd.Compression.none.compress(torch.ones(1))[0].tolist() != [1.0]:
        fails.append("Compression.none")
    # Horovod's values (horovod/common/message.h): a script that passes them as integers, or
    # writes `op or hvd.Average`, gets the same reduction
    horovod = {"Average": 0, "Sum": 1, "Adasum": 2, "Min": 3, "Max": 4, "Product": 5}
    for name, value in horovod.items():
        if getattr(hvd, name) != value:
            fails.append(f"hvd.{name} is {int(getattr(hvd, name))}, Horovod's is {value}")
    x = torch.full((3,), float(RANK + 1))
    for op, want in ((1, N * (N + 1) / 2), (0, (N + 1) / 2), (3, 1.0), (4, float(N)),
                     (hvd.Sum or hvd.Average, N * (N + 1) / 2)):
        got = hvd.allreduce(x, op=op, name=f"basics.op.{op}")
        if not torch.allclose(got, torch.full((3,), want)):
            fails.append(f"op={op!r}: {got.tolist()} where Horovod gives {want}")
    assert_everywhere(fails)


def test_adasum():
    """op=hvd.Adasum in every allreduce form, against the NumPy reference of the recursive
    formula, identical on every rank; integer tensors and reducescatter refused on every rank."""
    fails = []
    for dt in (np.dtype("float16"), BF16, np.dtype("float32"), np.dtype("float64")):
        inputs = [((0.5 + r) * np.linspace(-1, 1, 11) + np.cos(np.arange(11) * (r + 1)))
                  .astype(dt) for r in range(N)]
        want = adasum_reference(inputs)
        t = as_tensor(inputs[RANK])
        got = {"allreduce": hvd.allreduce(t, op=hvd.Adasum),
               "async": hvd.synchronize(hvd.allreduce_async(t, op=hvd.Adasum, name=f"ad.{dt}"))}
        u = as_tensor(inputs[RANK])
        hvd.allreduce_(u, op=hvd.Adasum)
        got["in place"] = u
        got["grouped"], twice = hvd.grouped_allreduce([t, 2 * t], op=hvd.Adasum)
        for form, out in got.items():
            if out.dtype != t.dtype or not adasum_close(as_numpy(out), want, 4):
                fails.append(f"{dt} {form}: {as_numpy(out)[:3]} vs {want[:3]}")
        if not adasum_close(as_numpy(twice), adasum_reference([2 * x for x in inputs]), 4):
            fails.append(f"{dt} grouped second tensor")
        if not same(t, inputs[RANK]):
            fails.append(f"{dt}: the input changed")
        digests = hvd.allgather_object(as_numpy(got["allreduce"]).tobytes())
        if len(set(digests)) != 1:
            fails.append(f"{dt}: results differ across ranks")
    for bad, kind in ((lambda: hvd.allreduce(torch.ones(3, dtype=torch.int64), op=hvd.Adasum),
                       TypeError),
                      (lambda: hvd.reducescatter(torch.ones(N, 2), op=hvd.Adasum), RuntimeError)):
        try:
            bad()
            fails.append("accepted")
        except kind as e:
            if "Adasum" not in str(e):
                fails.append(f"message without Adasum: {e}")
    assert_everywhere(fails)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product])
def test_allreduce_every_dtype(op):
    fails = []
    for dt in TORCH_OF:
        mine = rank_input(RANK, 7, dt, op)
        want = reference([rank_input(r, 7, dt, op) for r in range(N)], dt, op, N)
        t = as_tensor(mine)
        out = hvd.allreduce(t, op=op)
        h = hvd.allreduce_async(t, op=op, name=f"a.{dt}.{int(op)}")
        u = as_tensor(mine)
        hvd.allreduce_(u, op=op)
        v = as_tensor(mine)
        got_async = hvd.synchronize(h)
        h2 = hvd.allreduce_async_(v, op=op)
        while not hvd.poll(h2):
            pass
        hvd.synchronize(h2)
        if not (same(out, want) and same(got_async, want) and same(u, want) and same(v, want)
                and same(t, mine)):
            fails.append(f"{dt} {op!r}: {as_numpy(out)} vs {want}")
    assert_everywhere(fails)


def test_synchronous_allreduce_of_a_plain_tensor():
    """hvd.allreduce, hvd.allreduce_ and hvd.allreduce_async_ of a contiguous CPU tensor go to
    the NumPy face as they are (mpi_ops._plain): the same bits as the async form, in place on
    the tensor itself (allreduce_async_'s handle gives the tensor, and its name is in flight
    until then), and
    out of place a new tensor that owns its result. A result held by the caller (the output
    pool reuses a name's array only when nothing holds it) is never written by a later call
    of the same name, views and all; after it is let go the name still gives exact results. A
    tensor that requires grad, a
    strided one, a 0-d one, a Parameter and process_set=None take their usual forms."""
    fails = []
    n = (1 << 18) + 3               # past the pool's small-array size: kept and reused by name
    x = torch.arange(n, dtype=torch.float32) % 7 + RANK
    want = sum(torch.arange(n, dtype=torch.float32) % 7 + r for r in range(N))
    first = hvd.allreduce(x, op=hvd.Sum, name="plain.big")
    view = first[5:9]
    keep = first.clone()
    for i in range(3):
        y = x * (i + 2)
        later = hvd.allreduce(y, op=hvd.Sum, name="plain.big")
        if later.data_ptr() == first.data_ptr() or not torch.equal(first, keep):
            fails.append(f"call {i}: a held result was written")
        if not torch.equal(later, want * (i + 2)):
            fails.append(f"call {i}: {later[:4]} against {(want * (i + 2))[:4]}")
    if not torch.equal(view, keep[5:9]):
        fails.append("a view of a held result changed")
    async_ = hvd.allreduce_async(x, op=hvd.Sum, name="plain.async").synchronize()
    if not (torch.equal(first, async_) and first.dtype == x.dtype and first.shape == x.shape):
        fails.append("the synchronous result differs from the async one")
    z = x.clone()
    if hvd.allreduce_(z, op=hvd.Sum, name="plain.inplace") is not z or not torch.equal(z, want):
        fails.append(f"in place: {z[:4]}")
    w = x.clone()
    h = hvd.allreduce_async_(w, op=hvd.Sum, name="plain.async_")
    try:
        hvd.allreduce_async_(x.clone(), op=hvd.Sum, name="plain.async_")
        fails.append("a name in flight was submitted again")
    except DuplicateNameError:
        pass
    if not (hvd.synchronize(h) is w and hvd.poll(h) and h.synchronize() is w
            and torch.equal(w, want) and h.exception() is None):
        fails.append(f"allreduce_async_'s handle: {w[:4]}")
    p = torch.nn.Parameter(x.clone())
    hvd.allreduce_(p.data, op=hvd.Sum, name="plain.param")
    if not torch.equal(p.data, want):
        fails.append("a Parameter's data in place")
    g = x.clone().requires_grad_()
    r = hvd.allreduce(g, op=hvd.Sum, name="plain.grad")
    if not (r.requires_grad and torch.equal(r.detach(), want)):
        fails.append("requires_grad: not through autograd")
    s = torch.arange(2 * n, dtype=torch.float64)[::2] + RANK
    if not torch.equal(hvd.allreduce(s, op=hvd.Sum, process_set=None, name="plain.strided"),
                       sum(torch.arange(2 * n, dtype=torch.float64)[::2] + q for q in range(N))):
        fails.append("a strided tensor")
    if hvd.allreduce(torch.tensor(float(RANK)), op=hvd.Max, name="plain.0d").item() != N - 1:
        fails.append("a 0-d tensor")
    del first, view, later
    again = hvd.allreduce(x, op=hvd.Sum, name="plain.big")
    if not torch.equal(again, want):
        fails.append("after letting go")
    assert_everywhere(fails)


def test_async_and_grouped_allreduce_of_plain_tensors():
    """allreduce_async and grouped_allreduce(_) of contiguous CPU tensors go to the NumPy face
    (mpi_ops._plain, _plain_group): exact results; out of place new tensors a later call of the
    same name never writes while they are held; in place the caller's own tensors. A rank whose
    tensors take the general path (one strided tensor) agrees with ranks on the fast path, named
    or not: the parts' names are the same either way."""
    fails = []
    n = (1 << 18) + 3               # past the pool's small-array size: kept and reused by name
    x = torch.arange(n, dtype=torch.float32) % 7 + RANK
    want = sum(torch.arange(n, dtype=torch.float32) % 7 + r for r in range(N))
    handle = hvd.allreduce_async(x, op=hvd.Sum, name="pa.big")
    if not isinstance(handle, _bridge.AsTensor):
        fails.append(f"allreduce_async of a plain tensor: {type(handle).__name__}, not the "
                     "NumPy face's call")
    held = handle.synchronize()
    keep = held.clone()
    for i in range(2):
        later = hvd.synchronize(hvd.allreduce_async(x * (i + 2), op=hvd.Sum, name="pa.big"))
        if later.data_ptr() == held.data_ptr() or not torch.equal(held, keep):
            fails.append(f"allreduce_async call {i}: a held result was written")
        if not torch.equal(later, want * (i + 2)):
            fails.append(f"allreduce_async call {i}: {later[:4]}")
    if not torch.equal(held, want):
        fails.append(f"allreduce_async: {held[:4]}")
    parts = [x.clone(), (x[:1000] * 2).to(torch.float64), torch.arange(5, dtype=torch.int32) + RANK]
    wants = [want, (want[:1000] * 2).to(torch.float64),
             sum(torch.arange(5, dtype=torch.int32) + r for r in range(N))]
    gh = hvd.grouped_allreduce_async(parts, op=hvd.Sum, name="pg.h")
    if not isinstance(gh, _bridge.AsTensor):
        fails.append("grouped_allreduce_async of plain tensors: not the NumPy face's call")
    hvd.synchronize(gh)
    first = hvd.grouped_allreduce(parts, op=hvd.Sum, name="pg")
    kept = [f.clone() for f in first]
    again = hvd.grouped_allreduce([p * 3 for p in parts], op=hvd.Sum, name="pg")
    for i, (f, k, a, w, p) in enumerate(zip(first, kept, again, wants, parts)):
        if not (torch.equal(f, w) and f.dtype == p.dtype and f.data_ptr() != p.data_ptr()):
            fails.append(f"grouped_allreduce part {i}: {f[:4]}")
        if not torch.equal(f, k):
            fails.append(f"grouped_allreduce part {i}: a held result was written")
        if not torch.equal(a, w * 3):
            fails.append(f"grouped_allreduce again, part {i}: {a[:4]}")
    mine = [p.clone() for p in parts]
    got = hvd.grouped_allreduce_(mine, op=hvd.Sum, name="pg_")
    if not (all(g is m for g, m in zip(got, mine)) and all(map(torch.equal, mine, wants))):
        fails.append("grouped_allreduce_: not the caller's tensors, reduced")
    # the last rank takes the general path (a strided part), the others the fast one
    for name in ("pg.mixed", None):
        odd = torch.arange(2 * 7, dtype=torch.float32)[::2] + RANK
        plain = torch.arange(7, dtype=torch.float32) * 2 + RANK
        group = [x[:100].clone(), odd if RANK == N - 1 else plain]
        got = hvd.grouped_allreduce(group, op=hvd.Sum, name=name)
        w = sum(torch.arange(7, dtype=torch.float32) * 2 + r for r in range(N))
        if not (torch.equal(got[0], want[:100]) and torch.equal(got[1], w)):
            fails.append(f"grouped, mixed paths, name {name}: {got[1]}")
        one = hvd.allreduce_async(odd if RANK == N - 1 else plain, op=hvd.Sum, name=name)
        if not torch.equal(one.synchronize(), w):
            fails.append(f"allreduce_async, mixed paths, name {name}")
    assert_everywhere(fails)


def test_the_other_synchronous_calls_of_a_plain_tensor():
    """broadcast, broadcast_, allgather, reducescatter and alltoall of contiguous CPU tensors
    go to the NumPy face too: exact results and dtypes, and results of 64 KiB and more (which
    the output pool keeps by name or shape) never written by later calls while held."""
    fails = []
    rows = 8192 * N                 # 64 KiB a rank and more: pooled results
    x = torch.arange(rows * 2, dtype=torch.float32).view(rows, 2) + 1000 * RANK
    every = [torch.arange(rows * 2, dtype=torch.float32).view(rows, 2) + 1000 * r
             for r in range(N)]
    calls = {
        "broadcast": (lambda i: hvd.broadcast(x + i, root_rank=N - 1, name="p.bc"),
                      lambda i: every[N - 1] + i),
        "allgather": (lambda i: hvd.allgather(x + i, name="p.ag"),
                      lambda i: torch.cat(every) + i),
        "reducescatter": (lambda i: hvd.reducescatter(x + i, op=hvd.Sum, name="p.rs"),
                          lambda i: (sum(every) + N * i).narrow(0, RANK * (rows // N), rows // N)),
        "alltoall": (lambda i: hvd.alltoall(x + i, name="p.a2a"),
                     lambda i: torch.cat([e.narrow(0, RANK * (rows // N), rows // N) + i
                                          for e in every])),
    }
    for what, (call, want) in calls.items():
        held = [call(i) for i in range(3)]
        for i, got in enumerate(held):
            if not (got.dtype == x.dtype and torch.equal(got, want(i))):
                fails.append(f"{what} call {i}: {got.flatten()[:4]} against "
                             f"{want(i).flatten()[:4]}")
        if len({t.data_ptr() for t in held}) != len(held):
            fails.append(f"{what}: two held results share memory")
    y = x.clone()
    if hvd.broadcast_(y, root_rank=0, name="p.bc_") is not y or not torch.equal(y, every[0]):
        fails.append("broadcast_ in place")
    i64 = torch.full((N * 3,), RANK, dtype=torch.int64)
    out, got = hvd.alltoall(i64, splits=[3] * N, name="p.a2a.splits")
    if not (torch.equal(out, torch.arange(N).repeat_interleave(3))
            and got.dtype == torch.int32 and got.tolist() == [3] * N):
        fails.append(f"alltoall with splits: {out} {got}")
    assert_everywhere(fails)


def test_allreduce_average_alias_and_scaling():
    fails = []
    x = torch.arange(4, dtype=torch.float64) + RANK
    total = sum(torch.arange(4, dtype=torch.float64) + r for r in range(N))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        s, a = hvd.allreduce(x, average=False), hvd.allreduce(x, average=True)
    if not (torch.equal(s, total) and torch.allclose(a, total / N)):
        fails.append(f"average alias {s} {a}")
    if not any(issubclass(i.category, DeprecationWarning) for i in w):
        fails.append("no DeprecationWarning for average=")
    try:
        hvd.allreduce(x, average=True, op=hvd.Sum)
        fails.append("average and op both accepted")
    except ValueError:
        pass
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
    if not torch.allclose(got, total * 0.5):
        fails.append(f"scaled {got}")
    i = torch.full((3,), 3 * (RANK + 1), dtype=torch.int32)
    got = hvd.allreduce(i, op=hvd.Sum, postscale_factor=0.5)      # truncated, as in Horovod
    want = int(3 * N * (N + 1) / 2 * 0.5)
    if got.dtype != torch.int32 or got.tolist() != [want] * 3:
        fails.append(f"int scaling {got}")
    b = torch.tensor([RANK == 0, False, True])
    if hvd.allreduce(b, op=hvd.Max).tolist() != [True, False, True] or \
            hvd.allreduce(b, op=hvd.Min).tolist() != [N == 1, False, True]:
        fails.append("bool Max/Min")
    assert_everywhere(fails)


def test_grouped_forms():
    fails = []
    xs = [torch.full((i + 1,), float(RANK + i)) for i in range(3)]
    want = [torch.full((i + 1,), float(sum(r + i for r in range(N)))) for i in range(3)]
    outs = [hvd.grouped_allreduce(xs, op=hvd.Sum),
            hvd.synchronize(hvd.grouped_allreduce_async(xs, op=hvd.Sum))]
    ys = [x.clone() for x in xs]
    hvd.grouped_allreduce_(ys, op=hvd.Sum)
    zs = [x.clone() for x in xs]
    hvd.synchronize(hvd.grouped_allreduce_async_(zs, op=hvd.Sum))
    for got in outs + [ys, zs]:
        if not all(torch.equal(g, w) for g, w in zip(got, want)):
            fails.append(f"grouped allreduce {got}")
    parts = [torch.full((RANK + 1, 2), RANK + 10 * i, dtype=torch.int64) for i in range(2)]
    gathered = [torch.cat([torch.full((r + 1, 2), r + 10 * i, dtype=torch.int64)
                           for r in range(N)]) for i in range(2)]
    for got in (hvd.grouped_allgather(parts),
                hvd.synchronize(hvd.grouped_allgather_async(parts))):
        if not all(torch.equal(g, w) for g, w in zip(got, gathered)):
            fails.append(f"grouped allgather {got}")
    full = [torch.arange(N * 2 + i, dtype=torch.float64) * (RANK + 1) for i in range(2)]
    for got in (hvd.grouped_reducescatter(full, op=hvd.Sum),
                hvd.synchronize(hvd.grouped_reducescatter_async(full, op=hvd.Sum))):
        for i, g in enumerate(got):
            rows = np.array_split(np.arange(N * 2 + i, dtype=np.float64), N)[RANK]
            if g.tolist() != (rows * N * (N + 1) / 2).tolist():
                fails.append(f"grouped reducescatter {i}: {g}")
    assert_everywhere(fails)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.float16,
                                   torch.bfloat16, torch.float64])
def test_allgather_broadcast_alltoall_dtypes(dtype):
    fails = []

    def block(r, rows):
        return (torch.arange(rows * 2).view(rows, 2) + r) % 2 == 0 if dtype == torch.bool \
            else (torch.arange(rows * 2).view(rows, 2) + 10 * r).to(dtype)
    g = hvd.allgather(block(RANK, RANK + 1))
    ga = hvd.synchronize(hvd.allgather_async(block(RANK, RANK + 1)))
    want = torch.cat([block(r, r + 1) for r in range(N)])
    if not (g.dtype == dtype and torch.equal(g, want) and torch.equal(ga, want)):
        fails.append(f"allgather {g}")
    root = N - 1
    b = hvd.broadcast(block(RANK, 3), root_rank=root)
    t = block(RANK, 3)
    hvd.broadcast_(t, root_rank=root)
    ba = hvd.synchronize(hvd.broadcast_async(block(RANK, 3), root))
    t2 = block(RANK, 3)
    hvd.synchronize(hvd.broadcast_async_(t2, root))
    if not all(x.dtype == dtype and torch.equal(x, block(root, 3)) for x in (b, t, ba, t2)):
        fails.append(f"broadcast {b} {t}")
    # alltoall with uneven splits: rank r sends (r + d) % 3 rows to rank d
    splits = [(RANK + d) % 3 for d in range(N)]
    x = block(RANK, sum(splits))
    out, received = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32))
    pieces = []
    for src in range(N):
        s = [(src + d) % 3 for d in range(N)]
        pieces.append(block(src, sum(s))[sum(s[:RANK]):sum(s[:RANK + 1])])
    want = torch.cat(pieces)
    got_list, rec_list = hvd.alltoall(x, splits=splits)
    if not (torch.equal(out, want) and torch.equal(got_list, want) and received.dtype == torch.int32
            and received.tolist() == [(src + RANK) % 3 for src in range(N)]
            and rec_list.tolist() == received.tolist()):
        fails.append(f"alltoall {out} {received}")
    even = hvd.alltoall(block(RANK, 2 * N))
    ea, erec = hvd.synchronize(hvd.alltoall_async(block(RANK, 2 * N)))
    want = torch.cat([block(src, 2 * N)[2 * RANK:2 * RANK + 2] for src in range(N)])
    if not (torch.equal(even, want) and torch.equal(ea, want) and erec.tolist() == [2] * N):
        fails.append(f"even alltoall {even}")
    assert_everywhere(fails)


@pytest.mark.parametrize("who", ["every rank", "rank 0 only"])
def test_reducescatter_of_a_0d_tensor_fails_on_every_rank(who):
    """Horovod refuses a rank-zero tensor; here the bad rank's request goes out poisoned, so every
    rank raises (a RuntimeError, as in Horovod) instead of reducing or waiting; grouped too."""
    fails = []
    bad = torch.tensor(1.0) if who == "every rank" or RANK == 0 else torch.ones(N)
    calls = {"reducescatter": lambda: hvd.reducescatter(bad, name="rs0"),
             "async": lambda: hvd.reducescatter_async(bad, name="rs0a").synchronize(),
             "grouped": lambda: hvd.grouped_reducescatter([torch.ones(N), bad], name="grs0"),
             "autograd": lambda: hvd.reducescatter(bad.clone().requires_grad_(), name="rs0g")}
    for what, fn in calls.items():
        try:
            fn()
            fails.append(f"{what}: no error")
        except RuntimeError as e:
            if "rank" not in str(e) and "0-d" not in str(e):
                fails.append(f"{what}: {e}")
        except Exception as e:  # noqa: BLE001 - the wrong kind
            fails.append(f"{what}: {type(e).__name__}: {e}")
    ok = hvd.reducescatter(torch.ones(N, 2), op=hvd.Sum, name="rs0.after")   # nothing left over
    if ok.tolist() != [[float(N)] * 2]:
        fails.append(f"reducescatter afterwards {ok.tolist()}")
    assert_everywhere(fails)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_reducescatter_uneven(op):
    rows = 2 * N + 1
    x = (torch.arange(rows * 3, dtype=torch.float64).view(rows, 3) + 1) * (RANK + 1)
    total = (np.arange(rows * 3, dtype=np.float64).reshape(rows, 3) + 1) * N * (N + 1) / 2
    if op == hvd.Average:
        total = total / N
    want = np.array_split(total, N)[RANK]
    got = hvd.reducescatter(x, op=op)
    ga = hvd.synchronize(hvd.reducescatter_async(x, op=op))
    ok = np.allclose(got.numpy(), want, rtol=1e-12) and np.allclose(ga.numpy(), want, rtol=1e-12)
    assert_everywhere([] if ok else [f"{got} vs {want}"])


def test_join_refuses_all_but_allreduce():
    """Horovod's join: with the last rank joined, the others' Average divides by N (the joined
    rank adds zeros) and allgather, broadcast, alltoall and reducescatter raise, naming it, instead
    of waiting; the joined rank's join() returns once the others join."""
    if N < 2:
        return
    others = MPI.COMM_WORLD.Split(0 if RANK < N - 1 else 1, RANK)
    fails = []
    if RANK == N - 1:
        last = hvd.join()
    else:
        avg = hvd.allreduce(torch.full((2,), 6.0), name="tj.avg")
        if avg.tolist() != [6.0 * (N - 1) / N] * 2:
            fails.append(f"average with a joined rank {avg.tolist()}")
        for kind, fn in [("allgather", lambda: hvd.allgather(torch.ones(1, 2), name="tj.g")),
                         ("broadcast", lambda: hvd.broadcast(torch.ones(2), 0, name="tj.b")),
                         ("alltoall", lambda: hvd.alltoall(torch.ones(N), name="tj.a")),
                         ("reducescatter", lambda: hvd.reducescatter(torch.ones(N), name="tj.r"))]:
            try:
                fn()
                fails.append(f"{kind} ran with a joined rank")
            except RuntimeError as e:
                if f"(rank {N - 1} joined)" not in str(e):
                    fails.append(f"{kind}: {e}")
        last = hvd.join()
    others.Free()
    if last not in range(N - 1):
        fails.append(f"join returned {last}")
    assert_everywhere(fails)


def test_objects_barrier_join():
    fails = []
    obj = hvd.broadcast_object({"rank": RANK, "nested": [RANK, {"x": RANK}]}, root_rank=N - 1)
    if obj != {"rank": N - 1, "nested": [N - 1, {"x": N - 1}]}:
        fails.append(f"broadcast_object {obj}")
    if hvd.allgather_object(("r", RANK)) != [("r", r) for r in range(N)]:
        fails.append("allgather_object")
    hvd.barrier()
    # uneven step counts: rank r runs r + 1 steps then joins; joined ranks contribute nothing
    sums = [hvd.allreduce(torch.ones(2), op=hvd.Sum, name=f"join.step.{k}").tolist()
            for k in range(RANK + 1)]
    last = hvd.join()
    if sums != [[float(N - k)] * 2 for k in range(RANK + 1)] or last != N - 1:
        fails.append(f"join: sums {sums}, last {last}")
    if hvd.join(device=-1) not in range(N):
        fails.append("second join")
    assert_everywhere(fails)


def test_objects_travel_by_cloudpickle_as_in_horovod():
    """Horovod's object collectives pickle with cloudpickle: a lambda or a closure arrives."""
    pytest.importorskip("cloudpickle")
    k = 7
    fn = hvd.broadcast_object(lambda x: x * k + RANK, root_rank=0, name="obj.lambda")
    fns = hvd.allgather_object(lambda: RANK * k, name="obj.closures")
    ok = fn(1) == 7 and [f() for f in fns] == [r * k for r in range(N)]
    assert_everywhere([] if ok else [f"lambda gave {fn(1)}, closures {[f() for f in fns]}"])


# ---- errors: Horovod's built-in types, on every rank, and the runtime stays usable -----------

def _kind(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test reports the type
        return e
    return None


def test_error_types():
    fails = []
    cases = [
        ("shape", lambda: hvd.allreduce(torch.ones(RANK + 2), name="bad.shape"), RuntimeError,
         RuntimeError),
        ("dtype", lambda: hvd.allreduce(torch.ones(2, dtype=torch.float32 if RANK else
                                                   torch.float64), name="bad.dtype"),
         RuntimeError, RuntimeError),
        ("root", lambda: hvd.broadcast(torch.ones(2), root_rank=N + 5, name="bad.root"),
         ValueError, ValueError),
        ("device (one rank)", lambda: hvd.allreduce(
            torch.ones(2, device="meta" if RANK == 0 else "cpu"), name="bad.device"),
         (ValueError, RuntimeError), RuntimeError),
        ("root mismatch", lambda: hvd.broadcast(torch.ones(2), root_rank=RANK,
                                                name="bad.roots"), RuntimeError, RuntimeError),
        ("broadcast shape", lambda: hvd.broadcast(torch.ones(RANK + 1), 0, name="bad.bshape"),
         RuntimeError, RuntimeError),
        ("allgather dtype", lambda: hvd.allgather(
            torch.ones(2, dtype=torch.int32 if RANK else torch.int64), name="bad.gtype"),
         RuntimeError, RuntimeError),
        # (whole-number float splits are Horovod's int32 of them: taken; fractions are not)
        ("fractional splits", lambda: hvd.alltoall(torch.ones(N), torch.full((N,), 1.5),
                                                   name="bad.fsplit"), ValueError, ValueError),
        ("device (all)", lambda: hvd.allgather(torch.ones(2, device="meta"), name="bad.dev2"),
         ValueError, ValueError),
        ("alltoall splits", lambda: hvd.alltoall(torch.ones(3), splits=[1] * (N + 1),
                                                 name="bad.splits"), ValueError, ValueError),
        ("allgather tail", lambda: hvd.allgather(torch.ones(1, RANK + 1), name="bad.tail"),
         RuntimeError, RuntimeError),
        ("int name (one rank)", lambda: hvd.allreduce(torch.ones(2), name=5 if RANK == 0 else "5"),
         ValueError, RuntimeError),
        ("grouped given a tensor (one rank)", lambda: hvd.grouped_allreduce(
            torch.ones(3) if RANK == 0 else [torch.ones(3)], name="bad.glist"),
         ValueError, RuntimeError),
    ]
    for what, fn, mine, others in cases:
        e = _kind(fn)
        want = mine if RANK == 0 else others
        for w in want if isinstance(want, tuple) else (want,):
            if not isinstance(e, w):
                fails.append(f"{what}: got {type(e).__name__}: {e} (expected {w.__name__})")
    # rank 0's first "dup.name" is surely in flight while the others wait at a barrier (a peer
    # already in the round could otherwise complete it before the second submit)
    if RANK == 0:
        held = hvd.allreduce_async(torch.ones(1), name="dup.name")
        e = _kind(lambda: hvd.allreduce_async(torch.ones(1), name="dup.name"))
        if N > 1 and not isinstance(e, ValueError):
            fails.append(f"duplicate name in flight: {type(e).__name__}: {e}")
        MPI.COMM_WORLD.Barrier()
    else:
        MPI.COMM_WORLD.Barrier()
        held = hvd.allreduce_async(torch.ones(1), name="dup.name")
    hvd.synchronize(held)
    if hvd.allreduce(torch.ones(1), op=hvd.Sum).item() != N:
        fails.append("runtime unusable after errors")
    assert_everywhere(fails)


# ---- gradients against the analytic ones -----------------------------------------------------

def weights(r, *shape):
    """Rank r's loss weights: loss_r = (output * weights(r)).sum()."""
    g = torch.Generator().manual_seed(1000 + r)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def close(a, b):
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-12, atol=1e-12)


def test_allreduce_grad():
    fails = []
    for op in (hvd.Sum, hvd.Average):
        x = torch.randn(5, dtype=torch.float64, requires_grad=True)
        (hvd.allreduce(x, op=op) * weights(RANK, 5)).sum().backward()
        # d/dx_r of sum_k loss_k, loss_k = w_k . op(x_0..x_N-1)
        want = sum(weights(k, 5) for k in range(N)) / (N if op == hvd.Average else 1)
        if not close(x.grad, want):
            fails.append(f"{op!r}: {x.grad} vs {want}")
    xs = [torch.randn(i + 2, dtype=torch.float64, requires_grad=True) for i in range(2)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    sum((o * weights(RANK + 7 * i, i + 2)).sum() for i, o in enumerate(outs)).backward()
    for i, x in enumerate(xs):
        if not close(x.grad, sum(weights(k + 7 * i, i + 2) for k in range(N))):
            fails.append(f"grouped {i}")
    assert_everywhere(fails)


def test_allgather_and_broadcast_grad():
    fails = []
    rows = [r + 1 for r in range(N)]
    x = torch.randn(RANK + 1, 3, dtype=torch.float64, requires_grad=True)
    (hvd.allgather(x) * weights(RANK, sum(rows), 3)).sum().backward()
    # Horovod's convention: the gradient of the mean of the ranks' losses
    start = sum(rows[:RANK])
    want = sum(weights(k, sum(rows), 3) for k in range(N))[start:start + RANK + 1] / N
    if not close(x.grad, want):
        fails.append(f"allgather {x.grad} vs {want}")
    xs = [torch.randn(RANK + 1, 2, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    outs = hvd.grouped_allgather(xs)
    sum((o * weights(RANK + 5 * i, sum(rows), 2)).sum() for i, o in enumerate(outs)).backward()
    for i, x in enumerate(xs):
        want = sum(weights(k + 5 * i, sum(rows), 2) for k in range(N))[start:start + RANK + 1] / N
        if not close(x.grad, want):
            fails.append(f"grouped allgather {i}")
    root = N - 1
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    (hvd.broadcast(b, root_rank=root) * weights(RANK, 4)).sum().backward()
    want = sum(weights(k, 4) for k in range(N)) / N if RANK == root else torch.zeros(4, dtype=torch.float64)
    if not close(b.grad, want):
        fails.append(f"broadcast {b.grad} vs {want}")
    assert_everywhere(fails)


def test_alltoall_grad():
    def sp(r):
        return [(r + d) % 3 + 1 for d in range(N)]
    x = torch.randn(sum(sp(RANK)), 2, dtype=torch.float64, requires_grad=True)
    out, received = hvd.alltoall(x, splits=sp(RANK))
    recv_rows = [sp(src)[RANK] for src in range(N)]
    (out * weights(RANK, sum(recv_rows), 2)).sum().backward()
    # rows this rank sent to rank d got weights(d)'s rows for source RANK
    want = []
    for d in range(N):
        into = [sp(src)[d] for src in range(N)]
        at = sum(into[:RANK])
        want.append(weights(d, sum(into), 2)[at:at + sp(RANK)[d]])
    want = torch.cat(want)
    ok = close(x.grad, want) and received.tolist() == recv_rows
    assert_everywhere([] if ok else [f"{x.grad} vs {want}"])


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_reducescatter_grad(op):
    rows = [len(a) for a in np.array_split(np.arange(2 * N + 1), N)]
    x = torch.randn(2 * N + 1, 2, dtype=torch.float64, requires_grad=True)
    (hvd.reducescatter(x, op=op) * weights(RANK, rows[RANK], 2)).sum().backward()
    # Horovod's convention: allgather of the output gradients, times size for Sum; that is
    # size x the gradient of the sum of the ranks' losses
    want = torch.cat([weights(k, rows[k], 2) for k in range(N)]) * (N if op == hvd.Sum else 1)
    xs = [torch.randn(2 * N, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    outs = hvd.grouped_reducescatter(xs, op=op)
    sum((o * weights(RANK + 3 * i, 2)).sum() for i, o in enumerate(outs)).backward()
    fails = [] if close(x.grad, want) else [f"{x.grad} vs {want}"]
    for i, xi in enumerate(xs):
        w = torch.cat([weights(k + 3 * i, 2) for k in range(N)]) * (N if op == hvd.Sum else 1)
        if not close(xi.grad, w):
            fails.append(f"grouped {i}: {xi.grad} vs {w}")
    assert_everywhere(fails)


DUPLICATE_CALLS = {
    "allreduce": (lambda t, nm: hvd.allreduce_async(t, name=nm), lambda t, nm: hvd.allreduce(t, name=nm)),
    "allreduce_": (lambda t, nm: hvd.allreduce_async_(t, name=nm),
                   lambda t, nm: hvd.allreduce_(t, name=nm)),
    "grouped_allreduce": (lambda t, nm: hvd.grouped_allreduce_async([t, t.clone()], name=nm),
                          lambda t, nm: hvd.grouped_allreduce([t, t.clone()], name=nm)),
    "allgather": (lambda t, nm: hvd.allgather_async(t, name=nm), lambda t, nm: hvd.allgather(t, name=nm)),
    "broadcast": (lambda t, nm: hvd.broadcast_async(t, 0, name=nm),
                  lambda t, nm: hvd.broadcast(t, 0, name=nm)),
    "alltoall": (lambda t, nm: hvd.alltoall_async(t, name=nm), lambda t, nm: hvd.alltoall(t, name=nm)),
    "reducescatter": (lambda t, nm: hvd.reducescatter_async(t, name=nm),
                      lambda t, nm: hvd.reducescatter(t, name=nm)),
}


@pytest.mark.parametrize("kind", sorted(DUPLICATE_CALLS))
def test_duplicate_names_with_the_peer_in_a_barrier(kind):
    """Horovod's pattern (its test_horovod_*_duplicate_name_error): rank 0 submits a name,
    drops the handle and submits it again while the others wait in a barrier: a ValueError at
    once, not a wait for a peer that waits for rank 0. Then the others submit it and the
    dropped request completes."""
    start, run = DUPLICATE_CALLS[kind]
    name = f"duplicate_name.torch.{kind}"
    fails = []
    hvd.barrier()
    if RANK == 0:
        start(torch.ones(2 * N, 3), name)
        try:
            for _ in range(10):
                start(torch.ones(2 * N, 3), name)
            fails.append(f"{kind}: a second {name!r} was not refused")
        except ValueError as e:
            if name not in str(e) or "in flight" not in str(e):
                fails.append(f"{kind}: {type(e).__name__}: {e}")
    hvd.barrier()
    if RANK != 0:
        run(torch.ones(2 * N, 3), name)
    hvd.barrier()
    assert_everywhere(fails)


@pytest.mark.parametrize("method", ["fp16", "bf16"])
def test_compressed_in_place_allreduce_of_a_plain_tensor(method):
    """allreduce_async_ with compression=fp16/bf16 on a contiguous CPU float32 tensor (what
    DistributedOptimizer(compression=...) does for every gradient) hands its NumPy view to the
    compressor, skipping the general path: it returns the tensor itself, reduced to the bits
    the general path gives (a tensor it takes: prescale_factor=1.0 but a strided view), on
    every rank. The last rank takes the general path for the same name, and they agree."""
    if method == "bf16":
        pytest.importorskip("ml_dtypes")
    c = getattr(hvd.Compression, method)
    fails = []
    g = (torch.arange(4099, dtype=torch.float32) * 1e-3 - 2) * (RANK + 1)
    for name in (f"cmp.{method}", None):
        short = g.clone()
        h = hvd.allreduce_async_(short, name=name, compression=c)
        if name and type(h).__name__ != "CastHandle":
            fails.append(f"{method}: {type(h).__name__}, not the compressor's lean way")
        if hvd.synchronize(h) is not short:
            fails.append(f"{method}, name {name}: not the tensor itself")
        base = torch.zeros(2 * 4099, dtype=torch.float32)
        strided = base[::2]
        strided.copy_(g)
        got = hvd.synchronize(hvd.allreduce_async_(strided, name=f"cmp.{method}.s" if name else None,
                                                   compression=c))
        if got is not strided or not torch.equal(strided, short):
            fails.append(f"{method}, name {name}: the general path's bits differ")
    mixed = g.clone() if RANK < N - 1 else torch.zeros(2 * 4099)[::2].copy_(g)
    got = hvd.synchronize(hvd.allreduce_async_(mixed, name=f"cmp.{method}.mixed", compression=c))
    if not torch.equal(got, short):
        fails.append(f"{method}: ranks on the two paths disagree")
    assert_everywhere(fails)
    assert_identical_everywhere(short.numpy(), f"cmp.{method}")


@pytest.mark.parametrize("call", ["allreduce", "allreduce_async", "broadcast", "broadcast_async"])
def test_a_sparse_tensor_on_one_rank_fails_every_rank(call):
    """Horovod refuses sparse tensors with a ValueError; here the refusal also reaches the
    ranks that passed a dense one (before, torch's own error from making the output came
    first, on rank 0 alone, and the others waited)."""
    dense = torch.ones(3)
    x = dense.to_sparse() if RANK == 0 else dense
    fn = getattr(hvd, call)
    args = (x,) if call.startswith("allreduce") else (x, 0)

    def go():
        h = fn(*args, name=f"sparse.{call}")
        if call.endswith("_async"):
            hvd.synchronize(h)
    expect_raise_everywhere(go, ValueError if RANK == 0 else RuntimeError, "sparse")


def test_broadcast_parameters_with_a_non_tensor_on_one_rank():
    """The rank whose dict holds a non-tensor raises ValueError naming it; its tensors were
    broadcast first, so the other ranks get root's values and nobody waits."""
    params = {"w": torch.full((3,), float(RANK))}
    if RANK == N - 1:
        params["step"] = 7
    failures = []
    try:
        hvd.broadcast_parameters(params, root_rank=0)
        if RANK == N - 1:
            failures.append(f"rank {RANK}: the int entry went through")
    except ValueError as e:
        if RANK != N - 1 or "'step' is a int" not in str(e):
            failures.append(f"rank {RANK}: {e}")
    if not torch.equal(params["w"], torch.zeros(3)):
        failures.append(f"rank {RANK}: w is {params['w'].tolist()}, not root's")
    assert_everywhere(failures)
