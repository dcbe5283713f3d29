"""Rank side: the background coordinator -- async submission in any order, fusion, the response
cache, every collective against NumPy, join, errors on every rank, shutdown, idle CPU.

Runs under several HVLITE_FUSION_THRESHOLD / HVLITE_CACHE_CAPACITY settings (see
tests/_core/test_coordinator.py); rank 0 prints a digest of every result so runs can be compared.
"""
import hashlib
import time

import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
from helpers import BF16, assert_everywhere, expect_raise_everywhere

hvd.init()
N, RANK = hvd.size(), hvd.rank()
DIGEST = hashlib.sha1()


def tensor(i, rank, dtype=np.float32):
    """Tensor i of a step: small integers, so any reduction order gives the same bits."""
    shape = [(3,), (17,), (4096,), (5, 7), (0,), (1,), (300, 3)][i % 7]
    return ((np.arange(int(np.prod(shape))) % 11) + rank + i % 5).reshape(shape).astype(dtype)


def test_200_tensors_in_a_different_random_order_on_every_rank():
    rng = np.random.default_rng(RANK)
    failures = []
    for step in range(3):               # later steps agree through the cache
        order = rng.permutation(200)
        handles = {i: hvd.allreduce_async(tensor(i, RANK), op=hvd.Sum, name=f"grad.{i}")
                   for i in order}
        for i in range(200):
            got = hvd.synchronize(handles[i])
            want = sum(tensor(i, r) for r in range(N))
            if not np.array_equal(got, want):
                failures.append(f"step {step} grad.{i}: {got.ravel()[:4]} != {want.ravel()[:4]}")
            DIGEST.update(got.tobytes())
    assert_everywhere(failures)


def test_mixed_dtypes_and_ops_in_one_round():
    dtypes = [np.float32, np.float64, np.int32, np.int8, np.float16] + ([BF16] if BF16 else [])
    ops = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]
    handles, wants = [], []
    for k in range(60):
        dt, op = dtypes[k % len(dtypes)], ops[(k // len(dtypes)) % len(ops)]
        inputs = [((np.arange(9) % 3) + 1 + (r % 2)).astype(dt) for r in range(N)]
        if op == hvd.Sum:
            want = np.sum([a.astype(np.float64) for a in inputs], axis=0)
        elif op == hvd.Average:
            want = np.sum([a.astype(np.float64) for a in inputs], axis=0).astype(dt) / np.asarray(N, dt)
        elif op == hvd.Min:
            want = np.min(inputs, axis=0)
        elif op == hvd.Max:
            want = np.max(inputs, axis=0)
        else:
            want = np.prod([a.astype(np.float64) for a in inputs], axis=0)
        if np.issubdtype(np.dtype(dt), np.integer) and op == hvd.Average:
            want = np.sum(inputs, axis=0, dtype=np.int64) // N
        wants.append(np.asarray(want).astype(dt))
        handles.append(hvd.allreduce_async(inputs[RANK], op=op, name=f"mixed.{k}"))
    failures = [f"mixed.{k}" for k, (h, w) in enumerate(zip(handles, wants))
                if not np.array_equal(hvd.synchronize(h).astype(np.float64), w.astype(np.float64))]
    assert_everywhere(failures)


def test_grouped_and_in_place():
    xs = [np.full(s, RANK + 1.0) for s in (1, 10, 1000)]
    got = hvd.grouped_allreduce(xs, op=hvd.Sum, name="group")
    y = np.full(5, float(RANK))
    h = hvd.allreduce_async_(y, op=hvd.Max, name="inplace")
    same = hvd.synchronize(h)
    ok = all(np.all(g == N * (N + 1) / 2) for g in got) and same is y and np.all(y == N - 1)
    assert_everywhere([] if ok else [f"grouped {got} in-place {y}"])


def test_poll_then_synchronize_and_duplicate_names():
    """A name in flight on this rank is refused. Rank 0 submits it first and the others only
    after its checks (a barrier), so it is surely still in flight: deciding by poll() on each
    rank raced with the round and left the ranks' collective calls unpaired."""
    failures = []
    if RANK == 0:
        h = hvd.allreduce_async(np.ones(4), name="dup", op=hvd.Sum)
        try:        # alone, the first may have completed already: nothing else holds it back
            hvd.allreduce_async(np.ones(4), name="dup")
            if N > 1:
                failures.append("a second 'dup' in flight was accepted")
        except hvd.InvalidArgumentError as e:
            if "dup" not in str(e) or "already in flight" not in str(e):
                failures.append(f"message {e}")
        if N > 1 and h.poll():
            failures.append("'dup' completed before the other ranks submitted it")
        MPI.COMM_WORLD.Barrier()
    else:
        MPI.COMM_WORLD.Barrier()
        h = hvd.allreduce_async(np.ones(4), name="dup", op=hvd.Sum)
    got = hvd.synchronize(h)
    while not h.poll():
        time.sleep(0.001)
    if not np.all(got == N):
        failures.append(f"dup result {got}")
    assert_everywhere(failures)


def test_allgather_with_different_first_dimensions():
    x = np.full((RANK + 1, 3), RANK, dtype=np.int16)
    got = hvd.allgather(x)
    want = np.concatenate([np.full((r + 1, 3), r, np.int16) for r in range(N)])
    z = hvd.allgather(np.zeros((0, 2)) if RANK % 2 else np.ones((2, 2)))
    nz = sum(2 for r in range(N) if r % 2 == 0)
    ok = np.array_equal(got, want) and z.shape == (nz, 2)
    DIGEST.update(got.tobytes())
    assert_everywhere([] if ok else [f"allgather {got.tolist()} / {z.shape}"])


def test_broadcast_from_every_root():
    failures = []
    for root in range(N):
        x = np.arange(10, dtype=np.float64) + 100 * RANK
        got = hvd.broadcast(x, root, name=f"bcast.{root}")
        if not np.array_equal(got, np.arange(10) + 100 * root) or not np.array_equal(x, np.arange(10) + 100 * RANK):
            failures.append(f"root {root}: {got}")
        y = np.full(3, RANK, np.int64)
        hvd.broadcast_(y, root, name=f"bcast_.{root}")
        if not np.all(y == root):
            failures.append(f"in place root {root}: {y}")
    assert_everywhere(failures)


def test_alltoall_equal_and_uneven():
    x = np.repeat(np.arange(N) + 10 * RANK, 2).astype(np.float32)     # 2 rows for each rank
    got = hvd.alltoall(x)
    want = np.concatenate([np.full(2, RANK + 10 * r, np.float32) for r in range(N)])
    splits = [(RANK + d) % 3 for d in range(N)]                       # uneven, some zero
    rows = np.concatenate([np.full((s, 2), 100 * RANK + d) for d, s in enumerate(splits)]).astype(np.int32)
    got2, recv = hvd.alltoall(rows.reshape(-1, 2), splits=splits)
    want_splits = [(r + RANK) % 3 for r in range(N)]
    want2 = np.concatenate([np.full((want_splits[r], 2), 100 * r + RANK) for r in range(N)]).astype(np.int32)
    ok = (np.array_equal(got, want) and list(recv) == want_splits and
          np.array_equal(got2.reshape(-1, 2), want2.reshape(-1, 2)))
    assert_everywhere([] if ok else [f"alltoall {got} / {got2.tolist()} {list(recv)}"])


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Max])
def test_reducescatter(op):
    rows = 2 * N + 1
    inputs = [np.arange(rows * 3, dtype=np.float64).reshape(rows, 3) * (r + 1) for r in range(N)]
    got = hvd.reducescatter(inputs[RANK], op=op)
    full = {hvd.Sum: np.sum, hvd.Average: np.mean, hvd.Max: np.max}[op](inputs, axis=0)
    start = sum(rows // N + (1 if r < rows % N else 0) for r in range(RANK))
    want = full[start:start + rows // N + (1 if RANK < rows % N else 0)]
    assert_everywhere([] if np.allclose(got, want) and got.shape == want.shape else [f"{got} != {want}"])


def test_barrier_and_objects():
    hvd.barrier()
    hvd.barrier_async().synchronize()
    obj = {"rank": RANK, "payload": list(range(RANK))}
    got = hvd.broadcast_object(obj, root_rank=N - 1)
    everyone = hvd.allgather_object(obj)
    h1, h2 = hvd.broadcast_object_async(RANK * 7, root_rank=0), hvd.allgather_object_async(RANK)
    ok = got == {"rank": N - 1, "payload": list(range(N - 1))} and [e["rank"] for e in everyone] == list(range(N))
    ok = ok and h1.synchronize() == 0 and h2.synchronize() == list(range(N))
    assert_everywhere([] if ok else [f"objects {got} {everyone}"])


@pytest.mark.parametrize("kind", ["shape", "dtype", "op", "collective", "root"])
def test_every_mismatch_raises_on_every_rank_quickly(kind):
    odd = RANK == N - 1 and N > 1
    name = f"bad.{kind}"
    x = np.ones(5 if (odd and kind == "shape") else 4, np.float64 if (odd and kind == "dtype") else np.float32)
    t0 = time.monotonic()
    if kind == "root":
        fn = lambda: hvd.broadcast(x, root_rank=(1 if odd else 0), name=name)  # noqa: E731
    elif kind == "collective" and odd:
        fn = lambda: hvd.allgather(x, name=name)  # noqa: E731
    else:
        fn = lambda: hvd.allreduce(x, op=hvd.Max if (odd and kind == "op") else hvd.Sum, name=name)  # noqa: E731
    if N == 1:
        fn()
        return
    field = {"shape": "shape", "dtype": "dtype", "op": "op", "collective": "collective", "root": "root rank"}[kind]
    expect_raise_everywhere(fn, hvd.MismatchError, name, f"disagree on {field}", f"rank {N - 1}")
    assert_everywhere([] if time.monotonic() - t0 < 10 else ["took too long"])
    hvd.allreduce(np.ones(2))   # still usable


def test_join_with_uneven_steps():
    """Rank r runs r+2 steps; a joined rank adds zeros and Average still divides by N (Horovod)."""
    failures = []
    for step in range(RANK + 2):
        got = hvd.allreduce(np.ones(3, np.float32) * (step + 1), op=hvd.Sum, name=f"join.grad.{step}")
        avg = hvd.allreduce(np.full(2, float(RANK)), name=f"join.avg.{step}")
        active = [r for r in range(N) if r + 2 > step]
        if not np.all(got == len(active) * (step + 1)):
            failures.append(f"step {step} sum {got}, active {active}")
        if not np.allclose(avg, sum(active) / N):
            failures.append(f"step {step} average {avg}, active {active}, want {sum(active) / N}")
    last = hvd.join()
    if last != N - 1:
        failures.append(f"join returned {last}")
    assert_everywhere(failures)
    assert_everywhere([] if np.all(hvd.allreduce(np.ones(2), op=hvd.Sum) == N) else ["after join"])


def test_unnamed_calls_out_of_step_with_a_joined_rank_fail_at_once():
    """Horovod's test_horovod_join_allgather: each rank in turn joins while the others make an
    unnamed allgather, which must fail naming it. From the second turn the joiners' automatic
    names are out of step (whoever joined before made one allgather fewer): each fails at once
    all the same, and join still returns a rank that is not the one that joined first."""
    if N < 2:
        pytest.skip("needs a rank to join")
    failures = []
    for first in range(N):
        t0 = time.monotonic()
        if RANK != first:
            try:
                hvd.allgather(np.ones((2, 3), np.float32))
                failures.append(f"turn {first}: the allgather ran")
            except hvd.MismatchError as e:
                if f"(rank {first} joined)" not in str(e) and "joined)" not in str(e):
                    failures.append(f"turn {first}: {e}")
        last = hvd.join()
        if last == first and N > 1 or last not in range(N):
            failures.append(f"turn {first}: join returned {last}")
        if time.monotonic() - t0 > 30:
            failures.append(f"turn {first} took {time.monotonic() - t0:.0f} s")
        if len(set(MPI.COMM_WORLD.allgather(last))) != 1:
            failures.append(f"turn {first}: join returned different ranks")
    assert_everywhere(failures)
    # every rank made N - 1 unnamed allgathers: in step again
    got = hvd.allgather(np.full((1, 2), RANK, np.float32))
    assert_everywhere([] if np.array_equal(got[:, 0], np.arange(N)) else [f"after: {got}"])


def test_only_allreduce_runs_while_a_rank_has_joined():
    """With the last rank joined, the others' allgather, broadcast, alltoall and reducescatter fail
    at once naming it (also when the name is in the response cache); then everyone joins."""
    if N < 2:
        pytest.skip("needs a rank to join")
    kinds = {"broadcast": lambda: hvd.broadcast(np.ones(3), 0, name="jc.b"),
             "allgather": lambda: hvd.allgather(np.ones((1, 2)), name="jc.g"),
             "alltoall": lambda: hvd.alltoall(np.ones(N), name="jc.a"),
             "reducescatter": lambda: hvd.reducescatter(np.ones(N), name="jc.r")}
    for fn in kinds.values():           # once with every rank: cacheable ones take a cache slot
        fn()
    others = MPI.COMM_WORLD.Split(0 if RANK < N - 1 else 1, RANK)
    failures = []
    if RANK == N - 1:
        last = hvd.join()
    else:
        t0 = time.monotonic()
        for kind, fn in kinds.items():
            expect_raise_everywhere(fn, hvd.MismatchError, kind, f"(rank {N - 1} joined)", comm=others)
        got = hvd.allreduce(np.full(2, 3.0), name="jc.avg")
        if not np.allclose(got, 3.0 * (N - 1) / N):
            failures.append(f"average with a joined rank {got}")
        if time.monotonic() - t0 > 10:
            failures.append("took too long")
        last = hvd.join()
    others.Free()
    if last not in range(N - 1):
        failures.append(f"join returned {last}")
    assert_everywhere(failures)
    for fn in kinds.values():           # everyone active again: they run
        fn()


def test_a_waiting_handle_ends_the_cycle_pause():
    """Between rounds whose requests wait for other ranks, the coordinator pauses up to the
    cycle time (to gather a burst of submissions); a thread blocked on a handle submits nothing
    more, so its rank skips the pause. Rank 0 submits 'a' and waits; the others submit 'b',
    pause, and 0.3 s later call 'a': with a 2 s cycle time that call completes at once, not
    when rank 0's pause would have ended."""
    coord = hvd._current().global_state.coordinator
    before = coord.autotune_state()["cycle_time_ms"] / 1e3
    x = np.ones(1000, np.float32)
    hvd.allreduce(x, name="late.a")     # cached: the rounds below need no trip to rank 0
    hvd.allreduce(x, name="late.b")
    coord.configure(cycle_time=2.0)
    hvd.barrier()
    took = 0.0
    try:
        if RANK == 0:
            h = hvd.allreduce_async(x, name="late.a")
            time.sleep(0.05)            # a round runs with 'a' alone; then the pause
            got = [h.synchronize(), hvd.allreduce(x, name="late.b")]
        else:
            h = hvd.allreduce_async(x, name="late.b")
            time.sleep(0.3)
            t0 = time.monotonic()
            got = [hvd.allreduce(x, name="late.a")]
            took = time.monotonic() - t0
            got.append(h.synchronize())
    finally:
        coord.configure(cycle_time=before)
    # (the pause kept: 1.7 s; 1.4 s leaves room for 5 ranks on 2 cores)
    failures = [] if took < 1.4 else [f"rank {RANK}: the late call took {took:.2f} s"]
    if not all(np.array_equal(g, x) for g in got):      # Average of equal arrays
        failures.append(f"rank {RANK}: wrong result")
    assert_everywhere(failures)


def test_the_coordinator_thread_yields_to_the_callers():
    """On one node it runs as a batch task: a submit's wake-up does not preempt the submitting
    thread (across hosts it does not: tests/cluster/test_cluster.py)."""
    import os
    thread = hvd._current().global_state.thread
    assert thread.is_alive()
    assert os.sched_getscheduler(thread.native_id) == os.SCHED_BATCH
    assert os.sched_getscheduler(0) == os.SCHED_OTHER      # the caller's thread is left alone


def test_idle_coordinator_uses_no_cpu():
    hvd.barrier()
    t0, c0 = time.monotonic(), time.process_time()
    time.sleep(2.0)
    used = (time.process_time() - c0) / (time.monotonic() - t0)
    assert_everywhere([] if used < 0.01 else [f"idle process used {used:.1%} of a core"])


def test_zz_digest():
    if RANK == 0:
        print(f"\nDIGEST {DIGEST.hexdigest()}", flush=True)
    MPI.COMM_WORLD.Barrier()


def test_zz_shutdown_with_pending_work_fails_it():
    h = hvd.allreduce_async(np.ones(3), name="only.on.rank0") if RANK == 0 else None
    hvd.shutdown()
    if RANK == 0 and N > 1:
        with pytest.raises(hvd.ShutdownError, match="only.on.rank0|shut down"):
            h.synchronize()
    elif RANK == 0:
        h.synchronize()
    expect_raise_everywhere(lambda: hvd.allreduce(np.ones(1)), hvd.NotInitializedError)
    hvd.init()
    assert_everywhere([] if np.all(hvd.allreduce(np.ones(2), op=hvd.Sum) == N) else ["re-init"])
