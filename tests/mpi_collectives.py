"""Rank side: every async handle kind synchronized in a different order on each rank (none may
wait for a step another rank submits only later), and every collective on arrays with zeros
anywhere in their shape, against NumPy on the gathered inputs."""
import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
from helpers import assert_everywhere

hvd.init()
RANK, N = hvd.rank(), hvd.size()


def _start_all(tag):
    """One handle of every kind (the same names, in the same order, on every rank) and what each
    must synchronize to."""
    x = np.arange(6, dtype=np.float64) + RANK
    everyone = [np.arange(6, dtype=np.float64) + r for r in range(N)]
    rows = np.arange(2 * N, dtype=np.int32).reshape(N, 2) + 100 * RANK
    got_rows = np.concatenate([(np.arange(2 * N, dtype=np.int32).reshape(N, 2) + 100 * r)[RANK:RANK + 1]
                               for r in range(N)])
    rs = np.ones((N, 2)) * (RANK + 1)
    total = sum(r + 1 for r in range(N))
    return [
        ("allreduce", hvd.allreduce_async(x, op=hvd.Sum, name=f"{tag}.ar"), sum(everyone)),
        ("allgather", hvd.allgather_async(x[:RANK + 1], name=f"{tag}.ag"),
         np.concatenate([e[:r + 1] for r, e in enumerate(everyone)])),
        ("broadcast", hvd.broadcast_async(x, N - 1, name=f"{tag}.bc"), everyone[N - 1]),
        ("alltoall", hvd.alltoall_async(rows, name=f"{tag}.a2a"), got_rows),
        ("reducescatter", hvd.reducescatter_async(rs, op=hvd.Sum, name=f"{tag}.rs"),
         np.full((1, 2), float(total))),
        ("grouped", hvd.grouped_allreduce_async([x, x[:2]], op=hvd.Sum, name=f"{tag}.grp"),
         [sum(everyone), sum(everyone)[:2]]),
        ("broadcast_object", hvd.broadcast_object_async({"from": RANK, "n": [RANK] * RANK}, 0,
                                                        name=f"{tag}.bo"), {"from": 0, "n": []}),
        ("broadcast_object2", hvd.broadcast_object_async(("root", RANK), N - 1, name=f"{tag}.bo2"),
         ("root", N - 1)),
        ("allgather_object", hvd.allgather_object_async("x" * RANK, name=f"{tag}.ao"),
         ["x" * r for r in range(N)]),
        ("allgather_object2", hvd.allgather_object_async({RANK: RANK}, name=f"{tag}.ao2"),
         [{r: r} for r in range(N)]),
        ("barrier", hvd.barrier_async(), None),
    ]


def _same(a, b):
    if isinstance(b, list) and b and isinstance(b[0], np.ndarray):
        return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))
    if isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("round_", range(4))
def test_handles_synchronized_in_any_order(round_):
    handles = _start_all(f"order{round_}")
    order = list(range(len(handles)))
    if round_ == 0:         # the object handles in opposite orders on neighbouring ranks
        order = order[::-1] if RANK % 2 else order
    else:
        np.random.default_rng([round_, RANK]).shuffle(order)
    failures = []
    for i in order:
        kind, h, want = handles[i]
        got = hvd.synchronize(h)
        if not _same(got, want):
            failures.append(f"{kind}: {got!r} != {want!r}")
    assert_everywhere(failures)


def test_poll_alone_finishes_object_handles():
    """An object handle's second step goes out without synchronize(): polling is enough."""
    h = hvd.allgather_object_async(RANK, name="polled")
    while not hvd.poll(h):
        pass
    assert_everywhere([] if h.synchronize() == list(range(N)) else ["polled result"])


SHAPES = [(0,), (3, 0), (0, 4), (2, 0, 3)]


def _input(shape, rank, dtype=np.float32):
    return (np.arange(int(np.prod(shape)), dtype=dtype) + rank).reshape(shape)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_zero_size_shapes(shape):
    inputs = [_input(shape, r) for r in range(N)]
    x = inputs[RANK]
    failures = []

    def check(what, got, want):
        if not (isinstance(got, np.ndarray) and got.shape == want.shape and
                got.dtype == want.dtype and np.array_equal(got, want)):
            failures.append(f"{what} {shape}: got {getattr(got, 'shape', got)}, want {want.shape}")

    def attempt(what, fn, want):
        try:
            check(what, fn(), want)
        except Exception as e:  # noqa: BLE001 - reported on every rank
            failures.append(f"{what} {shape}: {type(e).__name__}: {e}")

    total = sum(inputs)
    attempt("allreduce", lambda: hvd.allreduce(x, op=hvd.Sum, name=f"z.ar{shape}"), total)
    attempt("allreduce_", lambda: hvd.allreduce_(x.copy(), op=hvd.Sum, name=f"z.ar_{shape}"), total)
    attempt("grouped", lambda: hvd.grouped_allreduce([x, x], op=hvd.Sum, name=f"z.g{shape}")[1],
            total)
    attempt("allgather", lambda: hvd.allgather(x, name=f"z.ag{shape}"), np.concatenate(inputs))
    # rows that differ by rank: rank r sends r rows of the same trailing shape
    ragged = [_input((r,) + shape[1:], r) for r in range(N)]
    attempt("allgather-ragged", lambda: hvd.allgather(ragged[RANK], name=f"z.agr{shape}"),
            np.concatenate(ragged))
    attempt("broadcast", lambda: hvd.broadcast(x, N - 1, name=f"z.bc{shape}"), inputs[N - 1])
    attempt("broadcast_", lambda: hvd.broadcast_(x.copy(), N - 1, name=f"z.bc_{shape}"),
            inputs[N - 1])
    rows = shape[0]
    splits = [rows // N + (1 if i < rows % N else 0) for i in range(N)]
    starts = np.concatenate([[0], np.cumsum(splits)])
    want = np.concatenate([inputs[r][starts[RANK]:starts[RANK + 1]] for r in range(N)])
    attempt("alltoall", lambda: hvd.alltoall(x, splits=splits, name=f"z.a2a{shape}")[0], want)
    even = _input((N * 2,) + shape[1:], RANK)
    want_even = np.concatenate([_input((N * 2,) + shape[1:], r)[2 * RANK:2 * RANK + 2]
                                for r in range(N)])
    attempt("alltoall-even", lambda: hvd.alltoall(even, name=f"z.a2ae{shape}"), want_even)
    block = rows // N + (1 if RANK < rows % N else 0)
    first = rows // N * RANK + min(RANK, rows % N)
    attempt("reducescatter", lambda: hvd.reducescatter(x, op=hvd.Sum, name=f"z.rs{shape}"),
            total[first:first + block])
    assert_everywhere(failures)


def test_compressed_handles_synchronized_in_opposite_orders():
    """PowerSGD's second all-reduce (Q) goes out when the first finishes, not at synchronize()."""
    from helpers import assert_identical_everywhere
    c = hvd.Compression.powersgd(rank=2)
    grads = [np.arange(64, dtype=np.float64).reshape(8, 8) * (i + 1) + RANK for i in range(2)]
    handles = [hvd.allreduce_async(g, name=f"psgd.{i}", compression=c) for i, g in enumerate(grads)]
    order = [1, 0] if RANK % 2 else [0, 1]
    got = {i: hvd.synchronize(handles[i]) for i in order}
    for i in range(2):
        assert_identical_everywhere(got[i], f"powersgd handle {i}")


def test_named_out_of_place_results_are_reused_only_when_let_go():
    """hvd.allreduce(..., name=) reuses its previous result once the caller dropped it (no page
    faults on fresh memory every step), never one the caller still holds."""
    import weakref
    failures = []
    x = np.full(1 << 15, RANK + 1, np.float32)
    first = hvd.allreduce(x, op=hvd.Sum, name="pool.g")
    second = hvd.allreduce(x * 2, op=hvd.Sum, name="pool.g")      # `first` is still held
    if second is first or not (first == N * (N + 1) / 2).all():
        failures.append("a result the caller held was overwritten")
    ref = weakref.ref(second)
    del first, second
    third = hvd.allreduce(x * 3, op=hvd.Sum, name="pool.g")
    if third is not ref():
        failures.append("the previous result, dropped, was not reused")
    if not (third == 3 * N * (N + 1) / 2).all():
        failures.append(f"result {third[:2]}")
    assert_everywhere(failures)


@pytest.mark.parametrize("algorithm", ["mpi", "ring", "rhd", "tree", "rd", None])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_results_have_the_same_bits_on_every_rank(algorithm, dtype):
    """Inputs whose sums are NaN by different routes (inf + -inf, a NaN of either sign met first
    or last): every rank gets the same bits, MPI's own reduction included."""
    specials = np.array([-np.inf, np.inf, np.nan, -np.nan, 1.0], dtype)
    x = np.roll(specials, RANK).repeat(3)
    got = hvd.allreduce(x, op=hvd.Sum, algorithm=algorithm, name=f"nan.{algorithm}.{dtype.__name__}")
    bits = MPI.COMM_WORLD.allgather(got.tobytes())
    assert_everywhere([] if len(set(bits)) == 1 else
                      [f"{algorithm}: NaN bits differ across ranks"])
