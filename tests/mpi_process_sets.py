"""Rank side: process sets -- every collective on overlapping subsets against NumPy, ranks
outside a set, concurrent work on several sets and the global set in different orders on every
rank, removal and re-adding, static sets, the optimizer on a subset, and every error.

Run with HVLITE_DYNAMIC_PROCESS_SETS=1 (tests/test_process_sets.py); the last test re-initializes
without it.
"""
import os

import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
from hvlite.optim import SGD, DistributedOptimizer
from hvlite.runtime import registered_sets as registered
from helpers import assert_everywhere, expect_raise_everywhere

N = MPI.COMM_WORLD.Get_size()
RANK = MPI.COMM_WORLD.Get_rank()
TAIL = hvd.ProcessSet(range(1, N))          # static: made by init()
hvd.init(process_sets=[TAIL] if N > 1 else [])
assert hvd.size() == N and hvd.rank() == RANK


def _dynamic_sets():
    """Overlapping subsets (none the whole job, none twice), the same on every rank."""
    seen = [list(range(N)), TAIL.ranks]
    out = []
    for ranks in (list(range(0, N, 2)), list(range(1, N, 2)), list(range(N - 1))):
        if ranks and ranks not in seen:
            seen.append(ranks)
            out.append(hvd.add_process_set(ranks))
    return out


DYNAMIC = _dynamic_sets()
SETS = ([TAIL] if N > 1 else []) + DYNAMIC


def value(rank, shape, k=0, dtype=np.float64):
    """Rank `rank`'s input: small integers, so every reduction order gives the same bits."""
    n = int(np.prod(shape))
    return ((np.arange(n) * (rank + 2) + 3 * k) % 13 - 6).reshape(shape).astype(dtype)


def test_process_set_objects():
    failures = []
    g = hvd.global_process_set
    if (g.process_set_id, g.ranks, g.size(), g.rank(), g.included()) != (0, list(range(N)), N, RANK, True):
        failures.append(f"global set: {g} size {g.size()} rank {g.rank()}")
    if N > 1 and TAIL.process_set_id != 1:
        failures.append(f"static set got id {TAIL.process_set_id}, want 1")
    ids = [ps.process_set_id for ps in SETS]
    if len(set(ids)) != len(ids) or 0 in ids or None in ids:
        failures.append(f"set ids {ids}")
    for ps in SETS:
        inside = RANK in ps.ranks
        if ps.size() != len(ps.ranks) or ps.included() != inside:
            failures.append(f"{ps}: size {ps.size()} included {ps.included()}")
        if inside and ps.rank() != ps.ranks.index(RANK):
            failures.append(f"{ps}: rank() {ps.rank()}")
        if not inside:
            try:
                ps.rank()
                failures.append(f"{ps}: rank() on an outsider did not raise")
            except ValueError as e:
                if "not part of process set" not in str(e):
                    failures.append(f"rank(): {e}")
    assert_everywhere(failures)


def _check_set(ps, failures):
    """Every collective on `ps` (this rank is a member) against NumPy on the members' inputs."""
    members, me = ps.ranks, ps.ranks.index(RANK)
    m = len(members)
    tag = f"set {ps.ranks}"
    # allreduce, each op, out of place and in place; grouped
    for op, dt in ((hvd.Sum, np.float64), (hvd.Average, np.float32), (hvd.Min, np.int32),
                   (hvd.Max, np.int64), (hvd.Product, np.float64)):
        ins = [value(r, (7, 3), int(op), dt) for r in members]
        stack = np.stack(ins).astype(np.float64)
        want = {hvd.Sum: stack.sum(0), hvd.Average: stack.sum(0) / m, hvd.Min: stack.min(0),
                hvd.Max: stack.max(0), hvd.Product: stack.prod(0)}[op].astype(dt)
        got = hvd.allreduce(ins[me], op=op, process_set=ps)
        if not np.array_equal(got, want):
            failures.append(f"{tag} allreduce {op}: {got.ravel()[:5]} != {want.ravel()[:5]}")
        buf = ins[me].copy()
        hvd.allreduce_(buf, op=op, process_set=ps)
        if not np.array_equal(buf, want):
            failures.append(f"{tag} allreduce_ {op}")
    group = hvd.grouped_allreduce([value(RANK, (s,), s) for s in (1, 5, 300)], op=hvd.Sum,
                                  process_set=ps)
    for s, got in zip((1, 5, 300), group):
        if not np.array_equal(got, sum(value(r, (s,), s) for r in members)):
            failures.append(f"{tag} grouped_allreduce size {s}")
    # allgather: first dimension differs by rank; set order
    got = hvd.allgather(value(RANK, (RANK + 1, 2)), process_set=ps)
    want = np.concatenate([value(r, (r + 1, 2)) for r in members])
    if not np.array_equal(got, want):
        failures.append(f"{tag} allgather: shape {got.shape} vs {want.shape}")
    # broadcast from each member (root_rank is a global rank)
    for root in members:
        got = hvd.broadcast(value(RANK, (4, 4), root), root, process_set=ps)
        buf = value(RANK, (5,), root)
        hvd.broadcast_(buf, root, process_set=ps)
        if not np.array_equal(got, value(root, (4, 4), root)) or not np.array_equal(buf, value(root, (5,), root)):
            failures.append(f"{tag} broadcast from {root}")
    # alltoall with uneven splits: member i sends (i + j) % 3 rows to member j
    splits = [(me + j) % 3 for j in range(m)]
    rows = np.concatenate([np.full((splits[j], 2), 100 * RANK + members[j]) for j in range(m)]
                          + [np.zeros((0, 2))]).astype(np.int32)
    got, rsplits = hvd.alltoall(rows, splits=splits, process_set=ps)
    want_splits = [(i + me) % 3 for i in range(m)]
    want = np.concatenate([np.full((want_splits[i], 2), 100 * members[i] + RANK) for i in range(m)]
                          + [np.zeros((0, 2))]).astype(np.int32)
    if list(rsplits) != want_splits or not np.array_equal(got, want):
        failures.append(f"{tag} alltoall: splits {list(rsplits)} want {want_splits}")
    if m > 1:
        even = hvd.alltoall(np.repeat(np.arange(m), 2) + 10 * RANK, process_set=ps)
        if not np.array_equal(even, np.repeat(10 * np.array(members), 2) + me):
            failures.append(f"{tag} alltoall without splits: {even}")
    # reducescatter: 2m+1 rows, the first (2m+1) % m members get one more
    total = sum(value(r, (2 * m + 1, 3), 5) for r in members)
    start = sum(2 + (1 if i < 1 else 0) for i in range(me))
    mine = 2 + (1 if me < 1 else 0)
    got = hvd.reducescatter(value(RANK, (2 * m + 1, 3), 5), op=hvd.Sum, process_set=ps)
    if not np.array_equal(got, total[start:start + mine]):
        failures.append(f"{tag} reducescatter rows {got.shape}")
    # objects, barrier
    hvd.barrier(process_set=ps)
    if hvd.allgather_object({"r": RANK}, process_set=ps) != [{"r": r} for r in members]:
        failures.append(f"{tag} allgather_object")
    if hvd.broadcast_object(("x", RANK), root_rank=members[-1], process_set=ps) != ("x", members[-1]):
        failures.append(f"{tag} broadcast_object")


def test_every_collective_on_each_subset():
    failures = []
    for ps in SETS:
        if RANK in ps.ranks:
            _check_set(ps, failures)
    assert_everywhere(failures)


def test_a_rank_outside_the_set_gets_a_clear_error():
    failures = []
    for ps in SETS:
        if RANK in ps.ranks:
            continue
        for call in (lambda: hvd.allreduce(np.ones(3), process_set=ps),
                     lambda: hvd.allgather(np.ones(3), process_set=ps),
                     lambda: hvd.broadcast(np.ones(3), ps.ranks[0], process_set=ps),
                     lambda: hvd.alltoall(np.ones(3), process_set=ps),
                     lambda: hvd.reducescatter(np.ones(3), process_set=ps),
                     lambda: hvd.grouped_allreduce([np.ones(3)], process_set=ps),
                     lambda: hvd.barrier(process_set=ps),
                     lambda: hvd.broadcast_object(1, ps.ranks[0], process_set=ps),
                     lambda: hvd.allgather_object(1, process_set=ps)):
            try:
                call()
                failures.append(f"{ps}: no error on outsider rank {RANK}")
            except hvd.InvalidArgumentError as e:
                if f"rank {RANK} is not part of process set {ps.process_set_id}" not in str(e):
                    failures.append(f"message: {e}")
    assert_everywhere(failures)


def test_sets_and_the_global_set_concurrently_in_any_order():
    """Each rank submits to all its sets and the global set in its own random order, then
    synchronizes in another: the sets never wait for each other."""
    rng = np.random.default_rng(RANK + 17)
    mine = [hvd.global_process_set] + [ps for ps in SETS if RANK in ps.ranks]
    jobs = [(ps, k) for ps in mine for k in range(25)]
    order = rng.permutation(len(jobs))
    handles = {}
    for j in order:
        ps, k = jobs[j]
        x = value(RANK, (k % 4 * 300 + 1,), k)
        handles[j] = hvd.allreduce_async(x, op=hvd.Sum, name=f"c.{k}", process_set=ps)
    failures = []
    for j in rng.permutation(len(jobs)):
        ps, k = jobs[j]
        got = handles[j].synchronize()
        want = sum(value(r, (k % 4 * 300 + 1,), k) for r in ps.ranks)
        if not np.array_equal(got, want):
            failures.append(f"{ps} c.{k}")
    assert_everywhere(failures)


def test_same_name_on_two_sets_is_two_tensors():
    failures = []
    mine = [hvd.global_process_set] + [ps for ps in SETS if RANK in ps.ranks]
    hs = [(ps, hvd.allreduce_async(np.full(3, RANK + 1.0), op=hvd.Sum, name="shared", process_set=ps))
          for ps in mine]
    for ps, h in hs:
        if not np.array_equal(h.synchronize(), np.full(3, sum(r + 1.0 for r in ps.ranks))):
            failures.append(f"{ps} 'shared'")
    assert_everywhere(failures)


def test_mismatch_inside_a_set_fails_every_member():
    for ps in SETS:
        if len(ps.ranks) < 2:
            continue
        comm = MPI.COMM_WORLD.Split(0 if RANK in ps.ranks else MPI.UNDEFINED, RANK)
        if comm != MPI.COMM_NULL:
            expect_raise_everywhere(
                lambda: hvd.allreduce(np.ones(ps.rank() + 2), name="bad.shape", process_set=ps),
                hvd.MismatchError, "bad.shape", "ranks disagree on shape",
                f"process set {ps.process_set_id}", comm=comm)
            expect_raise_everywhere(
                lambda: hvd.broadcast(np.ones(2), root_rank=-1 if ps.ranks[0] == 0 else 0,
                                      name="bad.root", process_set=ps),
                ValueError, "root_rank", f"process set {ps.process_set_id}", comm=comm)
            comm.Free()
        hvd.barrier()


def test_bad_rank_lists_fail_on_every_rank():
    expect_raise_everywhere(lambda: hvd.ProcessSet([0, 0]), ValueError, "more than once")
    expect_raise_everywhere(lambda: hvd.ProcessSet(["a"]), ValueError, "integers")
    expect_raise_everywhere(lambda: hvd.add_process_set([]), ValueError, "at least one rank")
    expect_raise_everywhere(lambda: hvd.add_process_set([0, N]), ValueError, f"[{N}]",
                            "not ranks of this job")
    # one rank with a bad list: every rank fails, the bad one named
    expect_raise_everywhere(lambda: hvd.add_process_set([0, N + 5] if RANK == N - 1 else [0]),
                            ValueError, "disagree", f"rank {N - 1}: [0, {N + 5}]")
    expect_raise_everywhere(lambda: hvd.add_process_set([0, N + 5]), ValueError,
                            f"rank {N - 1}: rank(s) [{N + 5}] are not ranks")
    if N > 1:
        expect_raise_everywhere(lambda: hvd.add_process_set([0] if RANK == 0 else [N - 1]),
                                ValueError, "disagree")
    expect_raise_everywhere(lambda: hvd.add_process_set(list(range(N))), ValueError,
                            "process set 0 already has ranks")
    assert hvd.remove_process_set(hvd.global_process_set) is False
    # nothing above registered a set
    assert [ps.ranks for ps in registered()] == [list(range(N))] + [ps.ranks for ps in SETS]


def test_remove_then_use_then_add_again():
    ps = DYNAMIC[0]
    ranks, old_id = ps.ranks, ps.process_set_id
    if RANK in ranks:
        hvd.allreduce(np.ones(2), name="before.removal", process_set=ps)
    assert hvd.remove_process_set(ps) is True
    failures = []
    # Horovod's rule: size() and rank() are None once removed; included() still answers from
    # the set's ranks
    if (ps.size() is not None or ps.included() != (RANK in ranks)
            or ps.process_set_id is not None):
        failures.append(f"removed set still answers: {ps} {ps.size()}")
    fresh = hvd.ProcessSet([0])                  # made, never added: Horovod answers from ranks
    if fresh.included() != (RANK == 0) or fresh.size() is not None:
        failures.append(f"an unregistered set: included {fresh.included()}, size {fresh.size()}")
    try:
        hvd.allreduce(np.ones(2), process_set=ps)
        failures.append("a collective on a removed set did not raise")
    except ValueError as e:
        if "not registered" not in str(e):
            failures.append(f"message: {e}")
    if hvd.remove_process_set(ps) is not False:
        failures.append("removing twice did not answer False")
    again = hvd.add_process_set(ranks)
    if again.process_set_id == old_id:
        failures.append(f"re-added set reused id {old_id}")
    DYNAMIC[0] = again
    SETS[SETS.index(ps)] = again
    if RANK in ranks:
        got = hvd.allreduce(np.full(2, float(RANK)), op=hvd.Sum, name="before.removal",
                            process_set=again)
        if not np.array_equal(got, np.full(2, float(sum(ranks)))):
            failures.append(f"re-added set: {got}")
    assert_everywhere(failures)


def test_distributed_optimizer_on_a_subset():
    """Members average their gradients over the set; outsiders step on their own."""
    ps = SETS[-1]
    params = {"w": np.zeros(6), "b": np.zeros(2)}
    opt = DistributedOptimizer(SGD(0.5), params, process_set=ps)
    failures = []
    for step in range(3):
        grads = {n: value(RANK, p.shape, step) for n, p in params.items()}
        before = {n: p.copy() for n, p in params.items()}
        for n in ("b", "w"):
            opt.grad_ready(n, grads[n])
        opt.step()
        for n in params:
            g = (sum(value(r, params[n].shape, step) for r in ps.ranks) / len(ps.ranks)
                 if RANK in ps.ranks else grads[n])
            if not np.allclose(params[n], before[n] - 0.5 * g, rtol=0, atol=1e-12):
                failures.append(f"step {step} {n}: {params[n]} vs {before[n] - 0.5 * g}")
    assert_everywhere(failures)


@pytest.mark.parametrize("method", ["fp16", "topk", "randomk"])
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "average"])
def test_compression_on_a_subset(method, op):
    """Compressed all-reduces on a set (Horovod takes compression= with process_set=): the
    members' gradients only, Average over the set's size, in place and out of place, the same
    bits on every member. fp16 against the set's plain all-reduce of the cast (to half's
    rounding: from 3 members two calls may add in different orders); top-k at ratio 1 sums every
    member's gradient in member order, the same bits; random-k at ratio 1 all-reduces them all."""
    failures = []
    for ps in SETS[:2]:
        if RANK not in ps.ranks:
            continue
        comp = {"fp16": lambda: hvd.Compression.fp16,
                "topk": lambda: hvd.Compression.topk(ratio=1.0),
                "randomk": lambda: hvd.Compression.randomk(ratio=1.0)}[method]()
        def grad(r):
            return np.random.default_rng([r, len(ps.ranks)]).standard_normal(37).astype(np.float32)
        g = grad(RANK)
        name = f"c.{method}.{op.name}.{ps.ranks}"
        got = hvd.allreduce(g, op=op, name=name, process_set=ps, compression=comp)
        inplace = g.copy()
        hvd.allreduce_(inplace, op=op, name=name + ".in", process_set=ps, compression=comp)
        if method == "fp16":
            want = hvd.allreduce(g.astype(np.float16), op=op, name=name + ".ref",
                                 process_set=ps).astype(np.float32)
        else:
            want = np.zeros(37, np.float32)
            for r in ps.ranks:
                want += grad(r)
            if op == hvd.Average:
                want /= np.float32(len(ps.ranks))
        tol = {"fp16": 4e-3, "topk": 0, "randomk": 1e-6}[method]
        for label, x in (("out of place", got), ("in place", inplace)):
            if not (x.tobytes() == want.tobytes() if not tol else
                    np.allclose(x, want, rtol=tol, atol=tol)):
                failures.append(f"{name} {label}: {x[:3]} against {want[:3]}")
        blobs = hvd.allgather_object(got.tobytes(), process_set=ps)
        if len(set(blobs)) != 1:
            failures.append(f"{name}: members differ")
    assert_everywhere(failures)


@pytest.mark.parametrize("method", ["topk", "sign"])
def test_a_compressors_state_is_kept_per_set(method):
    """One stateful compressor used under one tensor name on the global set and on every set
    this rank is in (as one optimizer's compressor would be) keeps a residual per set: each
    set's results and residuals are those of a compressor used on that set alone, bit for bit.
    Sharing one residual across sets fed one set's error into another's gradient."""
    make = {"topk": lambda: hvd.Compression.topk(ratio=0.25, momentum=0.5),
            "sign": lambda: hvd.Compression.sign(momentum=0.5)}[method]
    shared = make()
    sets = [hvd.global_process_set] + [ps for ps in SETS if RANK in ps.ranks]
    alone = [make() for _ in sets]
    failures = []
    for step in range(3):
        for k, ps in enumerate(sets):
            g = np.random.default_rng([RANK, step, k]).standard_normal(64).astype(np.float32)
            got = hvd.allreduce(g, op=hvd.Sum, name=f"c.state.{method}", process_set=ps,
                                compression=shared)
            want = hvd.allreduce(g, op=hvd.Sum, name=f"c.alone.{method}", process_set=ps,
                                 compression=alone[k])
            if got.tobytes() != want.tobytes():
                failures.append(f"step {step}, set {ps.ranks}: {got[:3]} against {want[:3]}")
            ra, rb = shared.residual(f"c.state.{method}", ps), alone[k].residual(f"c.alone.{method}", ps)
            if ra is None or rb is None or ra.tobytes() != rb.tobytes():
                failures.append(f"step {step}, set {ps.ranks}: the residuals differ")
    assert_everywhere(failures)


def test_static_sets_without_dynamic_after_reinit():
    """Last: shut down, re-initialize without dynamic sets; static sets still work, adding or
    removing is refused, and the old sets are gone."""
    old = SETS[-1]
    hvd.shutdown()
    for var in ("HVLITE_DYNAMIC_PROCESS_SETS", "HOROVOD_DYNAMIC_PROCESS_SETS"):
        os.environ.pop(var, None)
    static = hvd.ProcessSet([0, N - 1] if N > 2 else [N - 1])
    hvd.init(process_sets=[static] if N > 1 else [])
    hvd.init(process_sets=[static] if N > 1 else [])        # the same again: the running state
    try:
        failures = []
        if old.size() is not None:
            failures.append(f"a set from before shutdown still answers: {old}")
        if N > 1 and RANK in static.ranks:
            got = hvd.allreduce(np.full(3, RANK + 1.0), op=hvd.Sum, process_set=static)
            if not np.array_equal(got, np.full(3, sum(r + 1.0 for r in static.ranks))):
                failures.append(f"static set after re-init: {got}")
        assert_everywhere(failures)
        expect_raise_everywhere(lambda: hvd.add_process_set([0]), ValueError,
                                "HVLITE_DYNAMIC_PROCESS_SETS=1")
        if N > 1:
            expect_raise_everywhere(lambda: hvd.remove_process_set(static), ValueError,
                                    "HVLITE_DYNAMIC_PROCESS_SETS=1")
        # never registered: Horovod answers False, dynamic sets or not
        if hvd.remove_process_set(hvd.ProcessSet([0])) is not False:
            failures.append("removing a set never registered did not answer False")
        assert_everywhere(failures)
        expect_raise_everywhere(lambda: hvd.allreduce(np.ones(1), process_set=old), ValueError,
                                "not registered")
    finally:
        hvd.barrier()
