"""Rank side: the lean face (hvlite/_core/lean.pyx), at whatever N mpiexec gave.

It must take every plain call (a C-contiguous NumPy array of a dtype the core reduces, native
byte order, on the global set, a plain op, a str name or none, algorithm= a str it knows) and
give NumPy's bits on every rank, synchronously and async, in place and out of place; and it
must leave every other call to the general path (return None), which then converts, checks and
names the problem on every rank as before.
"""
import numpy as np
import pytest

import hvlite as hvd
from hvlite import runtime
from hvlite.errors import DtypeError, InvalidArgumentError, NotInitializedError
from helpers import (DTYPES, OPS, assert_everywhere, assert_identical_everywhere,
                     expect_raise_everywhere, rank_input, reference, same_bits)

hvd.init(process_sets="dynamic")
N, RANK = hvd.size(), hvd.rank()
LEAN = runtime.lean


def test_the_face_is_there_while_the_runtime_runs():
    assert LEAN is not None and LEAN is hvd._current().global_state.lean


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_plain_calls_are_taken_and_exact(dtype):
    """Every rank makes the same calls whatever it finds (a rank that skipped one after a wrong
    result would leave the others waiting in it)."""
    failures = []
    for op in OPS:
        for count in (0, 1, N + 2, 1001):
            inputs = [rank_input(r, count, dtype, op) for r in range(N)]
            want = reference(inputs, dtype, op, N)
            tag = f"{dtype} {op.name} {count}"
            got = LEAN.allreduce(inputs[RANK].copy(), op, f"lean.{tag}", None,
                                 hvd.global_process_set, False)
            if got is None or not same_bits(got, want):
                failures.append(f"{tag} out of place: {got if got is None else got[:4]}")
            x = inputs[RANK].copy()
            same = LEAN.allreduce(x, op, f"lean_.{tag}", "auto", hvd.global_process_set, True)
            if same is not x or not same_bits(x, want):
                failures.append(f"{tag} in place")
            h = LEAN.allreduce_async(inputs[RANK].copy(), op, None, None,
                                     hvd.global_process_set, False)
            if h is None or not same_bits(hvd.synchronize(h), want):
                failures.append(f"{tag} async unnamed")
            # the bits every rank got, whatever NumPy's answer: one result everywhere
            assert_identical_everywhere(x, tag)
    assert_everywhere(failures)


def test_aliases_and_shapes_the_face_takes():
    """An int64 array made as 'q' (another NumPy type number than 'l' for the same dtype), a
    0-d array, a 3-d one, uint64 made as 'Q': each taken, each exact."""
    failures = []
    q = np.arange(5, dtype="q")
    q += RANK
    uq = np.arange(3, dtype="Q")
    uq *= RANK
    assert q.dtype.char == "q" and uq.dtype.char == "Q"     # not NumPy's 'l' / 'L'
    cases = [(q, np.arange(5, dtype="q") + N - 1),
             (np.array(RANK + 1.5), np.array(N - 1 + 1.5)),
             (np.full((2, 3, 4), RANK, np.float32), np.full((2, 3, 4), N - 1, np.float32)),
             (uq, np.arange(3, dtype="Q") * (N - 1))]
    for k, (x, want) in enumerate(cases):
        got = LEAN.allreduce(x, hvd.Max, f"alias.{k}", None, hvd.global_process_set, False)
        if got is None:
            failures.append(f"case {k} ({x.dtype}, shape {x.shape}) was not taken")
        elif not same_bits(got, want.astype(x.dtype)):
            failures.append(f"case {k}: got {got!r}, want {want!r}")
    assert_everywhere(failures)


class Name(str):
    pass


def declined():
    """(what, call) pairs the face must leave to the general path."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    swapped = np.ones(4, np.dtype("f4").newbyteorder())
    g = hvd.global_process_set
    return [
        ("a list", lambda: LEAN.allreduce([1.0, 2.0], hvd.Sum, None, None, g, False)),
        ("a Fortran array", lambda: LEAN.allreduce(np.asfortranarray(a), hvd.Sum, None, None, g, False)),
        ("a strided view", lambda: LEAN.allreduce(a[:, ::2], hvd.Sum, None, None, g, False)),
        ("an ndarray subclass", lambda: LEAN.allreduce(np.ma.array(a), hvd.Sum, None, None, g, False)),
        ("read-only in place", lambda: LEAN.allreduce(ro, hvd.Sum, None, None, g, True)),
        ("byte-swapped", lambda: LEAN.allreduce(swapped, hvd.Sum, None, None, g, False)),
        ("bool dtype", lambda: LEAN.allreduce(np.ones(2, bool), hvd.Sum, None, None, g, False)),
        ("object dtype", lambda: LEAN.allreduce(np.array([1, None]), hvd.Sum, None, None, g, False)),
        ("complex dtype", lambda: LEAN.allreduce(np.ones(2, np.complex64), hvd.Sum, None, None, g, False)),
        ("op as an int", lambda: LEAN.allreduce(a, 0, None, None, g, False)),
        ("op as a str", lambda: LEAN.allreduce(a, "sum", None, None, g, False)),
        ("Adasum", lambda: LEAN.allreduce(a, hvd.Adasum, None, None, g, False)),
        ("a name that is an int", lambda: LEAN.allreduce(a, hvd.Sum, 7, None, g, False)),
        ("a str subclass as the name", lambda: LEAN.allreduce(a, hvd.Sum, Name("n"), None, g, False)),
        ("an unknown algorithm", lambda: LEAN.allreduce(a, hvd.Sum, None, "fastest", g, False)),
        ("algorithm not a str", lambda: LEAN.allreduce(a, hvd.Sum, None, 3, g, False)),
        ("process_set=None", lambda: LEAN.allreduce(a, hvd.Sum, None, None, None, False)),
        ("another process set", lambda: LEAN.allreduce(a, hvd.Sum, None, None, hvd.ProcessSet([0]), False)),
        ("async, a list", lambda: LEAN.allreduce_async([1.0], hvd.Sum, None, None, g, False)),
        ("async, op as an int", lambda: LEAN.allreduce_async(a, 0, None, None, g, True)),
        ("async, Adasum", lambda: LEAN.allreduce_async(a, hvd.Adasum, None, None, g, True)),
    ]


def test_what_the_face_leaves_to_the_general_path():
    """Declined calls, unnamed: each returns None, and none takes an automatic name (a rank
    that took one alone would meet the others' calls under shifted names)."""
    namer = hvd._current().global_state.auto_name
    before = namer("allreduce")
    failures = [what for what, call in declined() if call() is not None]
    after = namer("allreduce")
    k = int(before.rsplit(".", 1)[1])
    if after != before.rsplit(".", 1)[0] + f".{(k + 1) % 60}":
        failures.append(f"automatic names taken: {before} then {after}")
    assert_everywhere(failures)


def test_the_general_path_still_names_what_is_wrong():
    """Declined calls through the public API: converted and run, or refused on every rank."""
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    expect_raise_everywhere(lambda: hvd.allreduce_(ro, name="lean.ro"), InvalidArgumentError,
                            "read-only")
    expect_raise_everywhere(lambda: hvd.allreduce(np.ones(3, np.float32), name="lean.alg",
                                                  algorithm="fastest"),
                            InvalidArgumentError, "fastest")
    swapped = np.full(4, RANK + 1, np.dtype("f4").newbyteorder())
    expect_raise_everywhere(lambda: hvd.allreduce(swapped, op=hvd.Sum, name="lean.swapped"),
                            DtypeError, "dtype")
    got = hvd.allreduce([1, 2], op="sum", name="lean.list")
    assert_everywhere([] if list(got) == [N, 2 * N] else [f"a list with op 'sum': {got}"])
    got = hvd.allreduce(np.full(3, RANK, np.float32), op=hvd.Sum, process_set=None,
                        name="lean.none")
    want = np.full(3, N * (N - 1) / 2, np.float32)
    assert_everywhere([] if np.array_equal(got, want) else [f"process_set=None: {got}"])


def test_shm_where_the_segment_is_off_is_refused_and_not_cached():
    """algorithm='shm' where the segment is off: the face leaves it (the general path raises on
    every rank), and its table of algorithm codes does not keep it."""
    if hvd._current().shm_info["available"]:
        pytest.skip("the segment is available here")
    failures = []
    if LEAN.allreduce(np.ones(2, np.float32), hvd.Sum, None, "shm",
                      hvd.global_process_set, False) is not None:
        failures.append("the face took algorithm='shm'")
    if "shm" in hvd._current().global_state.algorithm_codes:
        failures.append("'shm' was cached as an algorithm")
    assert_everywhere(failures)
    expect_raise_everywhere(lambda: hvd.allreduce(np.ones(2, np.float32), algorithm="shm"),
                            InvalidArgumentError, "unavailable")


def _coordinator():
    return hvd._current().global_state.coordinator


def _quiet(c):
    """Collective: wait until nothing this rank submitted is in flight (an earlier test's
    refused call sends a poisoned request that completes in a later round of its own), then an
    MPI barrier: from here no rank runs a round until someone calls."""
    import time
    from mpi4py import MPI
    deadline = time.monotonic() + 60
    while c.in_flight():
        if time.monotonic() > deadline:
            pytest.fail(f"rank {RANK}: earlier requests still in flight after 60 s")
        time.sleep(0.005)
    MPI.COMM_WORLD.Barrier()


def test_a_call_its_first_round_does_not_complete():
    """A synchronous call runs its first round on the caller's thread (Coordinator.run_now).
    When the last rank comes late, the others' first round ends without it (the late rank's
    coordinator joins that round to answer its liveness ping, with nothing to offer): the call
    then waits as a submitted one does, is held until it completes, and gives the exact
    result; nothing stays held afterwards."""
    if N == 1:
        pytest.skip("needs a peer that is elsewhere")
    import time
    c = _coordinator()
    _quiet(c)
    rounds = c.rounds
    a = np.full(5, RANK + 1.0, np.float32)
    failures = []
    if RANK == N - 1:
        # Late until this rank's coordinator has answered the others' round (their liveness
        # ping brings it in, with nothing to offer): the only round they can be running.
        deadline = time.monotonic() + 60
        while c.rounds == rounds:
            if time.monotonic() > deadline:
                pytest.fail(f"rank {RANK}: the others' round never pinged this rank")
            time.sleep(0.005)
    got = hvd.allreduce(a, op=hvd.Sum, name="lean.late")
    if RANK != N - 1 and c.rounds - rounds < 2:
        failures.append(f"rank {RANK}: the call took {c.rounds - rounds} round(s)")
    if not np.array_equal(got, np.full(5, N * (N + 1) / 2, np.float32)):
        failures.append(f"result: {got}")
    if c.held() or c.in_flight():
        failures.append(f"still held afterwards: {c.held()}")
    assert_everywhere(failures)


def test_synchronous_calls_beside_async_ones_and_threads():
    """A synchronous call while async ones are in flight, and two threads making synchronous
    calls at once (one takes its round at once, the other finds it taken and queues): every
    result exact, nothing left held."""
    import threading
    failures = []
    x = np.arange(6, dtype=np.float64) + RANK
    want = sum(np.arange(6, dtype=np.float64) + r for r in range(N))
    handles = [hvd.allreduce_async(x, op=hvd.Sum, name=f"lean.beside.{k}") for k in range(4)]
    got = hvd.allreduce(x, op=hvd.Sum, name="lean.beside.sync")
    if not np.array_equal(got, want):
        failures.append(f"sync beside async: {got}")
    for h in handles:
        if not np.array_equal(hvd.synchronize(h), want):
            failures.append("an async result")

    def calls(t):
        for i in range(200):
            y = hvd.allreduce(x, op=hvd.Sum, name=f"lean.thread{t}.{i % 7}")
            if not np.array_equal(y, want):
                failures.append(f"thread {t} call {i}: {y}")
                return
    threads = [threading.Thread(target=calls, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c = _coordinator()
    if c.held() or c.in_flight():
        failures.append(f"still held afterwards: {c.held()}")
    assert_everywhere(failures)


def test_pooled_outputs_are_reused_only_when_nobody_holds_them():
    """Out of place from the pool's 16 KiB up, the face reuses a name's last result only when
    nothing but the pool holds it (no variable, no view) and it has the shape and dtype asked
    for (the pool's rule): a result still held is never overwritten."""
    pool = hvd._current().global_state.outputs
    failures = []
    x = np.arange(20000, dtype=np.float32) + RANK         # 80 KB: pooled
    want = sum(np.arange(20000, dtype=np.float32) + r for r in range(N))

    def call(a=x):
        return LEAN.allreduce(a, hvd.Sum, "lean.pool", None, hvd.global_process_set, False)
    call(), call()          # kept from the name's second call on
    first = call()
    kept = pool.arrays.get("lean.pool")
    if kept is not first:
        failures.append("the result is not the one the pool keeps")
    view = first[5:]
    second = call()
    if second is first or not np.array_equal(first, want) or not np.array_equal(second, want):
        failures.append("a held result was reused or overwritten")
    del first, view, kept
    third = call()
    if third is not second and pool.arrays.get("lean.pool") is not third:
        failures.append("third result not kept")
    del second
    kept_id = id(pool.arrays.get("lean.pool"))
    del third
    fourth = call()
    if id(fourth) != kept_id:
        failures.append("a result nobody held was not reused")
    other = call(x.astype(np.float64))
    if other.dtype != np.float64 or not np.array_equal(other, want.astype(np.float64)):
        failures.append(f"another dtype under the name: {other.dtype}")
    if not np.array_equal(fourth, want):
        failures.append("a reused result is wrong")
    unnamed = LEAN.allreduce(x, hvd.Sum, None, None, hvd.global_process_set, False)
    if not np.array_equal(unnamed, want) or any(v is unnamed for v in pool.arrays.values()):
        failures.append("an automatic name's result is wrong or kept by the pool")
    assert_everywhere(failures)


def test_a_loop_that_holds_its_last_result_reuses_the_one_before():
    """`y = hvd.allreduce(x, name=n)` in a loop: y holds the last result while the next call
    runs, so the pool's last one is not free, but the one before it is. Two arrays take turns,
    and the one held is never written."""
    failures = []
    x = np.arange(20000, dtype=np.float32) + RANK         # 80 KB: pooled
    want = sum(np.arange(20000, dtype=np.float32) + r for r in range(N))
    seen = set()
    y = None
    for i in range(8):
        last = y
        y = hvd.allreduce(x * (i + 1), op=hvd.Sum, name="lean.loop")
        if i >= 3:
            seen.add(id(y))
        if last is not None and (y is last or not np.array_equal(last, want * i)):
            failures.append(f"call {i}: the result still held was reused or overwritten")
        if not np.array_equal(y, want * (i + 1)):
            failures.append(f"call {i}: wrong result")
        del last
    if len(seen) != 2:
        failures.append(f"{len(seen)} arrays over 5 calls, not 2 taking turns")
    assert_everywhere(failures)


def _block(a, rank):
    """reducescatter's block of rows on `rank`: the first rows % N ranks get one more."""
    rows = a.shape[0]
    start = rank * (rows // N) + min(rank, rows % N)
    return a[start:start + rows // N + (1 if rank < rows % N else 0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_other_synchronous_collectives_are_taken_and_exact(dtype):
    """broadcast (either root, in place and not), allgather (as many rows everywhere, and a
    different count on every rank: a result the core allocates), alltoall in equal parts,
    reducescatter (every op) and barrier: each taken by the face, named or not, at sizes 0, 1
    and odd, with NumPy's bits on every rank."""
    g = hvd.global_process_set
    failures = []
    for count in (0, 1, N + 2, 1001):
        tag = f"{dtype} {count}"
        inputs = [rank_input(r, count, dtype, hvd.Sum) for r in range(N)]
        mine = inputs[RANK]
        for k, name in enumerate((f"lean.bc.{tag}", None)):
            root = (N - 1) if k else 0
            got = LEAN.broadcast(mine.copy(), root, name, g, False)
            if got is None or not same_bits(got, inputs[root]):
                failures.append(f"broadcast {tag} {name}: {got if got is None else got[:4]}")
            x = mine.copy()
            same = LEAN.broadcast(x, root, name and name + "_", g, True)
            if same is not x or not same_bits(x, inputs[root]):
                failures.append(f"broadcast_ {tag} {name}")
            got = LEAN.allgather(mine, name and name + "ag", g)
            if got is None or not same_bits(got, np.concatenate(inputs)):
                failures.append(f"allgather {tag} {name}")
            ragged = [np.resize(inputs[r], (count + r) % 5) for r in range(N)]
            got = LEAN.allgather(ragged[RANK], name and name + "agr", g)
            if got is None or not same_bits(got, np.concatenate(ragged)):
                failures.append(f"allgather, rows unlike every rank's {tag} {name}")
            parts = [np.resize(inputs[r], N * (count % 4)) for r in range(N)]
            got = LEAN.alltoall(parts[RANK], None, name and name + "aa", g)
            want = np.concatenate([p.reshape(N, -1)[RANK] for p in parts])
            if got is None or not same_bits(got, want):
                failures.append(f"alltoall {tag} {name}")
            if LEAN.barrier(g) is not True:
                failures.append("barrier not taken")
        for op in OPS:
            ins = [rank_input(r, count, dtype, op) for r in range(N)]
            got = LEAN.reducescatter(ins[RANK], op, f"lean.rs.{tag} {op.name}", g)
            want = _block(reference(ins, dtype, op, N), RANK)
            if got is None or not same_bits(got, want):
                failures.append(f"reducescatter {tag} {op.name}: {got}")
        assert_identical_everywhere(LEAN.allgather(mine, None, g), tag)
    assert_everywhere(failures)


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 5), (0, 4), (4, 0), (2 * N, 3)], ids=str)
def test_the_other_collectives_keep_the_trailing_shape(shape):
    """Rows of any width (none included), gathered results large enough for the pool named and
    not, and every rank's rows: the results' shapes and bits are NumPy's."""
    g = hvd.global_process_set
    failures = []
    for rows_scale in (1, 2000):        # 2000: a gathered result past the pool's 16 KiB
        full = (shape[0] * rows_scale,) + shape[1:]
        inputs = [np.arange(int(np.prod(full)), dtype=np.float32).reshape(full) + 1000 * r
                  for r in range(N)]
        for name in (f"lean.shape.{shape}.{rows_scale}", None):
            got = LEAN.allgather(inputs[RANK], name, g)
            want = np.concatenate(inputs)
            if got is None or got.shape != want.shape or not same_bits(got, want):
                failures.append(f"allgather {full} {name}: {None if got is None else got.shape}")
            got = LEAN.broadcast(inputs[RANK], N - 1, name, g, False)
            if got is None or got.shape != full or not same_bits(got, inputs[N - 1]):
                failures.append(f"broadcast {full} {name}")
            if full[0] % N == 0:
                got = LEAN.alltoall(inputs[RANK], None, name, g)
                want = np.concatenate([np.split(x, N)[RANK] for x in inputs])
                if got is None or got.shape != want.shape or not same_bits(got, want):
                    failures.append(f"alltoall {full} {name}")
            got = LEAN.reducescatter(inputs[RANK], hvd.Sum, name and name + ".rs", g)
            want = _block(sum(x.astype(np.float64) for x in inputs).astype(np.float32), RANK)
            if got is None or got.shape != want.shape or not same_bits(got, want):
                failures.append(f"reducescatter {full} {name}")
    assert_everywhere(failures)


def test_a_gather_too_large_to_shape_is_left_to_the_general_path():
    """Zero-width rows cost nothing, so a first dimension near the largest index is a legal
    array; the gathered result's row count would pass what NumPy can shape. The face declines
    it (takes no name) rather than fail on this rank alone; through the public call the core
    refuses the rows' total on every rank (on the segment, and on MPI's path without it)."""
    if N == 1:
        pytest.skip("one rank's gather is its own rows")
    namer = hvd._current().global_state.auto_name
    before = namer("allgather")
    huge = np.empty((2 ** 62, 0), np.int8)
    got = LEAN.allgather(huge, None, hvd.global_process_set)
    after = namer("allgather")
    k = int(before.rsplit(".", 1)[1])
    assert got is None and after == before.rsplit(".", 1)[0] + f".{(k + 1) % 60}"
    expect_raise_everywhere(lambda: hvd.allgather(huge, name="lean.huge"), hvd.MPIError,
                            "count out of range")


def test_the_other_collectives_leave_what_they_do_not_take():
    """What each face call leaves to the general path returns None and takes no automatic
    name; the general path then runs it, or names the problem on every rank."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = hvd.global_process_set
    declined_calls = [
        ("broadcast, a list", lambda: LEAN.broadcast([1.0], 0, None, g, False)),
        ("broadcast, a strided view", lambda: LEAN.broadcast(a[:, ::2], 0, None, g, False)),
        ("broadcast, root as a float", lambda: LEAN.broadcast(a, 0.0, None, g, False)),
        ("broadcast, root out of range", lambda: LEAN.broadcast(a, N, None, g, False)),
        ("broadcast, a negative root", lambda: LEAN.broadcast(a, -1, None, g, False)),
        ("broadcast, another set", lambda: LEAN.broadcast(a, 0, None, None, False)),
        ("broadcast, a name that is an int", lambda: LEAN.broadcast(a, 0, 3, g, False)),
        ("allgather, a 0-d array", lambda: LEAN.allgather(np.array(1.0), None, g)),
        ("allgather, bool", lambda: LEAN.allgather(np.ones(2, bool), None, g)),
        ("alltoall with splits", lambda: LEAN.alltoall(np.ones(N), [1] * N, None, g)),
        ("alltoall, rows the size does not divide", lambda: LEAN.alltoall(np.ones(N + 1), None, None, g))
        if N > 1 else ("alltoall, 0-d", lambda: LEAN.alltoall(np.array(1.0), None, None, g)),
        ("reducescatter, Adasum", lambda: LEAN.reducescatter(a, hvd.Adasum, None, g)),
        ("reducescatter, an unhashable op", lambda: LEAN.reducescatter(a, ["sum"], None, g)),
        ("reducescatter, op as an int", lambda: LEAN.reducescatter(a, 0, None, g)),
        ("barrier, process_set=None", lambda: LEAN.barrier(None)),
    ]
    namer = hvd._current().global_state.auto_name
    kinds = ("broadcast", "allgather", "alltoall", "reducescatter", "barrier")
    before = [namer(k) for k in kinds]
    failures = [what for what, call in declined_calls if call() is not None]
    after = [namer(k) for k in kinds]
    for b, c in zip(before, after):
        k = int(b.rsplit(".", 1)[1])
        if c != b.rsplit(".", 1)[0] + f".{(k + 1) % 60}":
            failures.append(f"automatic names taken: {b} then {c}")
    assert_everywhere(failures)
    expect_raise_everywhere(lambda: hvd.broadcast(a, N, name="lean.bc.root"),
                            InvalidArgumentError, "root")


def test_unnamed_calls_share_one_order_with_the_general_path():
    """The face and the general path count one kind's automatic names together: with rank 0's
    unnamed calls declined by the face every other time (a strided view, a list) and the
    others' taken, the k-th call still meets the same call on every rank, exact."""
    a = np.arange(24, dtype=np.float64).reshape(4, 6) * (RANK + 1)
    failures = []
    for k in range(4):
        # rank 0 alternates between the paths: a face counting names of its own would put it
        # out of step with the others at the second call
        general = RANK == 0 and k % 2 == 0
        x = a[:, ::2] if general else np.ascontiguousarray(a[:, ::2])
        got = hvd.broadcast(x, N - 1)
        if not np.array_equal(got, np.arange(24, dtype=np.float64).reshape(4, 6)[:, ::2] * N):
            failures.append(f"broadcast {k}: {got}")
        rows = x.tolist() if general else np.ascontiguousarray(x)
        got = hvd.allgather(rows)
        want = np.concatenate([np.arange(24.0).reshape(4, 6)[:, ::2] * (r + 1) for r in range(N)])
        if not np.array_equal(got, want):
            failures.append(f"allgather {k}: {got}")
        hvd.barrier()
    assert_everywhere(failures)


def test_cached_synchronous_calls_take_the_express_round():
    """A synchronous call whose name the response cache holds, made while nothing else is in
    flight here, takes the express round (Coordinator._express: one vote, no table, nothing
    allocated): every result still exact, on every rank."""
    c = _coordinator()
    failures = []
    x = np.arange(5, dtype=np.float32) + RANK
    want = sum(np.arange(5, dtype=np.float32) + r for r in range(N))
    b = np.full(3, float(RANK), np.float64)

    def step():
        got = [hvd.allreduce(x, op=hvd.Sum, name="lean.x.sum"), hvd.allreduce(x, name="lean.x.avg"),
               hvd.broadcast(b, root_rank=N - 1, name="lean.x.bc"),
               hvd.allgather(x[:2], name="lean.x.ag")]
        hvd.barrier()
        return got
    for _ in range(61):     # every automatic barrier name cached
        step()
    before = c.express_rounds
    steps = 40
    for i in range(steps):
        s, avg, bc, ag = step()
        if not (same_bits(s, want) and np.array_equal(avg, (want / N).astype(np.float32))
                and np.array_equal(bc, np.full(3, N - 1.0)) and
                np.array_equal(ag, np.concatenate([np.arange(2, dtype=np.float32) + r for r in range(N)]))):
            failures.append(f"step {i}: {s} {avg} {bc} {ag}")
            break
    _took_the_express_round(c, before, 5 * steps, "cached calls", failures)
    assert_everywhere(failures)


def _took_the_express_round(c, before, calls, what, failures, share=0.9):
    """At least `share` of `calls` took the express round (a liveness ping may send one through
    the tables), and nothing is held afterwards."""
    took = c.express_rounds - before
    if took < share * calls:
        failures.append(f"rank {RANK}: {took} of {calls} {what} took the express round")
    if c.held() or c.in_flight():
        failures.append(f"rank {RANK}: still held afterwards: {c.held()}")


def test_the_express_rounds_data_ride_with_its_vote():
    """On one node, the express round's all-reduce (in place and out of place, every op and
    dtype kind the segment reduces), broadcast (from each root), allgather, reducescatter (odd
    rows) and alltoall (equal parts, and splits) put this rank's
    data beside the vote, and the collective reads them where the vote's barrier published
    them: one barrier a call, not two (shm_waits()["carried"] counts them). Each result exact
    and the same bits on every rank, sizes 1, odd and a slot's worth; a call that does not fit
    beside the vote, and one with algorithm='ring', take their own barrier as before.
    (algorithm='shm': auto's data ride only where it picks shm.)"""
    if N == 1 or not hvd._current().shm_info["available"]:
        pytest.skip("no peers on a shared segment")
    c = _coordinator()
    failures = []
    cases = []
    for dtype in (np.float32, np.float64, np.int32, np.float16, np.uint8):
        for size in (1, 7, 1025):
            x = ((np.arange(size) % 5) + RANK).astype(dtype)
            g = np.stack([((np.arange(size) % 5) + r).astype(dtype) for r in range(N)])
            for op, want in ((hvd.Sum, g.sum(0, dtype=dtype)), (hvd.Max, g.max(0)),
                             (hvd.Min, g.min(0))):
                cases.append((x, op, want.astype(dtype), f"{np.dtype(dtype).name}.{size}.{op}"))
    xa = np.arange(999, dtype=np.float32) + RANK
    avg = (sum(np.arange(999, dtype=np.float32) + r for r in range(N)) / np.float32(N))
    b = np.arange(513, dtype=np.float64) * (RANK + 1)
    rows = np.full((3, 5), RANK, np.int16)
    parts = np.concatenate([np.full((2, 3), 10 * RANK + j, np.float32) for j in range(N)])
    uneven = np.full(N * (N + 1) // 2, RANK, np.int64)
    scat = np.full((2 * N + 1, 3), RANK + 1, np.float64)

    def step():
        got = []
        for x, op, want, name in cases:
            y = x.copy()
            hvd.allreduce_(y, op=op, name=f"ride.in.{name}", algorithm="shm")
            got.append((y, want, name))
            got.append((hvd.allreduce(x, op=op, name=f"ride.out.{name}", algorithm="shm"), want,
                        name))
        got.append((hvd.allreduce(xa, name="ride.avg"), None, "average"))
        for root in range(N):
            got.append((hvd.broadcast(b, root_rank=root, name=f"ride.bc.{root}"),
                        np.arange(513, dtype=np.float64) * (root + 1), f"broadcast from {root}"))
        got.append((hvd.allgather(rows, name="ride.ag"),
                    np.concatenate([np.full((3, 5), r, np.int16) for r in range(N)]), "allgather"))
        got.append((hvd.reducescatter(scat, op=hvd.Sum, name="ride.rs"),
                    np.full((len(np.array_split(np.arange(2 * N + 1), N)[RANK]), 3),
                            sum(r + 1 for r in range(N)), np.float64), "reducescatter"))
        got.append((hvd.alltoall(parts, name="ride.a2a"),
                    np.concatenate([np.full((2, 3), 10 * r + RANK, np.float32) for r in range(N)]),
                    "alltoall"))
        out, recv = hvd.alltoall(uneven, splits=list(range(1, N + 1)), name="ride.a2a.uneven")
        got.append((out, np.concatenate([np.full((RANK + 1,), r, np.int64) for r in range(N)]),
                    "alltoall with splits"))
        return got

    step()                       # every name cached
    calls = len(step()) - 1      # (auto's average rides only where auto picks shm)
    before = c.shm_waits()["carried"]
    steps = 5
    for i in range(steps):
        for got, want, name in step():
            if want is not None and not same_bits(got, want):
                failures.append(f"step {i}, {name}: {got[:4]} against {want[:4]}")
            elif want is None:
                assert_identical_everywhere(got, f"step {i}, {name}")
                if not np.allclose(got, avg):
                    failures.append(f"step {i}, {name}: {got[:4]} against {avg[:4]}")
    carried = c.shm_waits()["carried"] - before
    # a liveness ping may send a round through the tables now and then
    if carried < 0.9 * steps * calls:
        failures.append(f"rank {RANK}: {carried} of {steps * calls} cached calls carried their "
                        f"data with the vote")
    big = np.ones(hvd._current().shm_info["redundant_bytes"] // 4 + 17, np.float32)
    for i in range(3):
        before = c.shm_waits()["carried"]
        s = hvd.allreduce(big, op=hvd.Sum, name="ride.big")
        r = hvd.allreduce(xa, op=hvd.Sum, name="ride.ring", algorithm="ring")
        if i and c.shm_waits()["carried"] != before:
            failures.append(f"rank {RANK}: a call too large to ride, or for the ring, carried")
        if not (np.all(s == N) and np.array_equal(r, sum(np.arange(999, dtype=np.float32) + q
                                                         for q in range(N)))):
            failures.append(f"rank {RANK}: the large or the ring's result")
    assert_everywhere(failures)


def test_async_then_synchronize_takes_the_express_round():
    """An async call whose name the cache holds, then synchronize() with nothing else queued or
    pending: the waiting thread takes it out of the queue into the express round
    (Coordinator._express_queued), as a synchronous call would go. Results exact, in place and
    out of place; each handle is let go once it completed (the ledger learns of it), and the
    name is in flight until then. With two handles in flight, a name is still refused while it
    is in flight, and both results are exact whichever way each round went."""
    c = _coordinator()
    failures = []
    x = np.arange(6, dtype=np.float32) + RANK
    want = sum(np.arange(6, dtype=np.float32) + r for r in range(N))
    for _ in range(3):      # cached
        hvd.allreduce_async_(x.copy(), op=hvd.Sum, name="lean.q.a").synchronize()
        hvd.allreduce_async(x, op=hvd.Sum, name="lean.q.b").synchronize()
    before = c.express_rounds
    steps = 40
    for i in range(steps):
        y = x.copy()
        h = hvd.allreduce_async_(y, op=hvd.Sum, name="lean.q.a")
        got_a = h.synchronize()
        got_b = hvd.allreduce_async(x, op=hvd.Sum, name="lean.q.b").synchronize()
        if not (got_a is y and same_bits(y, want) and same_bits(got_b, want)):
            failures.append(f"step {i}: {got_a} {got_b}")
            break
    # a request the coordinator thread takes first (its grace ran out between a submit and
    # the synchronize: a preempted caller) goes the general way
    _took_the_express_round(c, before, 2 * steps, "async calls", failures, share=0.5)
    for i in range(10):
        ha = hvd.allreduce_async(x, op=hvd.Sum, name="lean.q.a")
        hb = hvd.allreduce_async(x, op=hvd.Sum, name="lean.q.b")
        try:
            hvd.allreduce_async(x, op=hvd.Sum, name="lean.q.a")
            failures.append(f"step {i}: a name in flight was submitted again")
        except hvd.HvliteError:
            pass
        if not (same_bits(hb.synchronize(), want) and same_bits(ha.synchronize(), want)):
            failures.append(f"step {i}: two in flight gave other bits")
            break
    if c.held() or c.in_flight():
        failures.append(f"rank {RANK}: still held after two in flight: {c.held()}")
    assert_everywhere(failures)


def test_a_loop_of_async_calls_leaves_the_round_lock_to_its_callers():
    """Async calls then synchronize in a loop: the coordinator thread a submit woke leaves each
    request its grace from its own submit, and when the callers have run everything meanwhile
    it goes back to sleep without taking the round lock (the caller that found the lock held
    slept until it was let go: a tenth of the loop's time on one rank). Its handles are the
    protocol's, hvlite.Handle and hvlite.work.Work, and can be weakly referenced. Afterwards a
    request nobody waits on still completes on the coordinator thread, and two threads waiting
    on one handle both return (the one whose round settles it without the completion monitor
    still wakes the other)."""
    import weakref
    from hvlite.work import Work
    c = _coordinator()
    failures = []
    x = np.arange(6, dtype=np.float32) + RANK
    want = sum(np.arange(6, dtype=np.float32) + r for r in range(N))
    h = hvd.allreduce_async(x, op=hvd.Sum, name="lean.loop.b")
    if not (isinstance(h, hvd.Handle) and isinstance(h, Work) and weakref.ref(h)() is h
            and h.name == "lean.loop.b"):
        failures.append(f"the handle: {type(h).__mro__}")
    if not (same_bits(h.synchronize(), want) and h.poll() and h.wait()
            and h.exception() is None and h() is h.result()):
        failures.append("the handle's protocol once settled")
    calls = 3000
    y = x.copy()
    before = c.stats()["idle_turns"]
    for _ in range(calls):
        y[:] = x
        hvd.allreduce_async_(y, op=hvd.Sum, name="lean.loop.a").synchronize()
    idle = c.stats()["idle_turns"] - before
    if not same_bits(y, want):
        failures.append(f"result {y}")
    # Alone, only a caller preempted between its submit and its synchronize for longer than the
    # grace lets the thread find the queue full and then, once it has the lock, empty. With
    # peers a caller also waits for them, so there only the results are checked.
    if N == 1 and idle > calls // 1000:
        failures.append(f"the coordinator thread took the round lock for nothing {idle} times "
                        f"in {calls} calls")
    import threading
    import time
    # After the loop (its callers ran every round themselves) a request nobody waits on still
    # runs, on the coordinator thread: poll() alone sees it complete
    h = hvd.allreduce_async(x, op=hvd.Sum, name="lean.loop.c")
    deadline = time.monotonic() + 30
    while not h.poll() and time.monotonic() < deadline:
        time.sleep(0.001)
    if not h.poll():
        failures.append("a request nobody waited on never ran")
    elif not same_bits(h.synchronize(), want):
        failures.append("the request nobody waited on: its result")
    # Two threads wait on one handle: the one whose round completes it wakes the other
    for i in range(20):
        h = hvd.allreduce_async(x, op=hvd.Sum, name="lean.loop.d")
        waited = []
        t = threading.Thread(target=lambda: waited.append(h.wait()))
        t.start()
        got = h.synchronize()
        t.join(30)
        if t.is_alive() or waited != [True] or not same_bits(got, want):
            failures.append(f"step {i}: two threads on one handle: {waited} {got}")
            break
    if c.held() or c.in_flight():
        failures.append(f"rank {RANK}: still held afterwards: {c.held()}")
    assert_everywhere(failures)


def test_an_express_round_that_does_not_come_back_clean():
    """Rank 0 has an all-reduce in flight when it makes a cached synchronous call; the others
    make that call first, in the express round, whose agreement then finds their slot not ready
    everywhere: their requests join the tables and the rounds go on as any other. And a rank
    whose cached call differs in shape misses, so the others' express round sees a miss: the
    mismatch on every rank, then the loop goes on."""
    failures = []
    x = np.arange(4, dtype=np.float64) + RANK
    want = sum(np.arange(4, dtype=np.float64) + r for r in range(N))
    for _ in range(2):      # both cached
        hvd.allreduce(x, op=hvd.Sum, name="lean.y.a")
        hvd.allreduce(x, op=hvd.Sum, name="lean.y.b")
    c = _coordinator()
    for i in range(20):
        before = c.express_rounds
        if RANK == 0:
            h = hvd.allreduce_async(x, op=hvd.Sum, name="lean.y.a")
            got_b = hvd.allreduce(x, op=hvd.Sum, name="lean.y.b")
            # alone, rank 0's all-reduce may complete on the coordinator thread before the
            # next call: then nothing is pending and the express round is right
            if c.express_rounds != before and N > 1:
                failures.append(f"step {i}: rank 0 took the express round with work pending")
            got_a = hvd.synchronize(h)
        else:
            got_b = hvd.allreduce(x, op=hvd.Sum, name="lean.y.b")
            got_a = hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum, name="lean.y.a"))
        if not (np.array_equal(got_a, want) and np.array_equal(got_b, want)):
            failures.append(f"step {i}: {got_a} {got_b}")
            break
    if N > 1:
        odd = N - 1
        try:
            hvd.allreduce(np.arange(5 if RANK == odd else 4, dtype=np.float64), op=hvd.Sum,
                          name="lean.y.b")
            failures.append(f"rank {RANK}: the odd shape ran")
        except hvd.MismatchError as e:
            if "(5,)" not in str(e):
                failures.append(f"rank {RANK}: the mismatch does not name the odd shape: {e}")
        if not np.array_equal(hvd.allreduce(x, op=hvd.Sum, name="lean.y.b"), want):
            failures.append("after the mismatch")
    if c.held() or c.in_flight():
        failures.append(f"still held afterwards: {c.held()}")
    assert_everywhere(failures)


def test_shutdown_takes_the_face_away():
    """Last: after shutdown the public call raises the general path's error, and never submits
    to a stopped coordinator through a face left behind."""
    hvd.shutdown()
    assert runtime.lean is None
    with pytest.raises(NotInitializedError):
        hvd.allreduce_(np.ones(2, np.float32))
