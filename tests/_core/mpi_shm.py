"""Rank side: the shared segment's life cycle and the shm path under the coordinator."""
import os
import time

import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
from helpers import assert_everywhere, expect_raise_everywhere

hvd.init()
N, RANK = hvd.size(), hvd.rank()
INFO = hvd._current().engine.shm_info()
ENABLED = os.environ.get("HVLITE_SHM", "1") != "0"


def test_segment_is_mapped_and_already_unlinked():
    failures = []
    # this job's segments only (other jobs, other hosts may share /dev/shm), and mappings of
    # /dev/shm only (an install path may contain "hvlite-" too)
    pids = MPI.COMM_WORLD.allgather(os.getpid())
    names = [e for e in os.listdir("/dev/shm") if any(e.startswith(f"hvlite-{p}-") for p in pids)]
    if names:
        failures.append(f"rank {RANK}: left in /dev/shm: {names}")
    maps = [line for line in open("/proc/self/maps") if "/dev/shm/hvlite-" in line]
    if ENABLED and hvd.local_size() > 1:
        if not INFO["available"]:
            failures.append(f"rank {RANK}: no segment: {INFO['why']}")
        # Engine and coordinator each map one; both names are gone already.
        if len({line.split()[-2] for line in maps}) != 2 or not all("(deleted)" in m for m in maps):
            failures.append(f"rank {RANK}: mappings {maps}")
    elif maps:
        failures.append(f"rank {RANK}: mapped without a segment: {maps}")
    assert_everywhere(failures)


@pytest.mark.skipif(ENABLED, reason="checks the refusal with HVLITE_SHM=0")
def test_disabled_is_a_named_error():
    x = np.ones(5, np.float32)
    expect_raise_everywhere(lambda: hvd.allreduce(x, algorithm="shm"), ValueError, "shm", "unavailable")


@pytest.mark.parametrize("algorithm", ["shm", "auto"])
def test_many_fused_cycles(algorithm):
    """Many rounds of mixed sizes through the coordinator: fused batches gathered into the
    segment and scattered out of it, tensors straddling segments and larger than several,
    submitted in a different order on every rank; every result against NumPy."""
    if algorithm == "shm" and not ENABLED:
        pytest.skip("HVLITE_SHM=0: only auto runs (over point-to-point)")
    rng = np.random.default_rng(7)
    slot = MPI.COMM_WORLD.allreduce(INFO["segment_bytes"], op=MPI.MAX) or (1 << 20)
    sizes = [0, 1, 3, 1000, 4099, slot // 8 + 1, slot // 8 * 5 + 5, 97]
    failures = []
    for step in range(25):
        dtypes = [np.float32, np.int64, np.float64]
        tensors = []
        for i, count in enumerate(sizes):
            dt = dtypes[(i + step) % 3]
            base = rng.integers(-50, 50, size=(N, count)).astype(dt)   # same on every rank
            tensors.append((f"s{step}.t{i}", base))
        order = np.random.default_rng(RANK * 1000 + step).permutation(len(tensors))
        handles = {}
        for j in order:
            name, base = tensors[j]
            handles[name] = hvd.allreduce_async(base[RANK].copy(), op=hvd.Sum, name=name,
                                                algorithm=algorithm)
        for name, base in tensors:
            got = handles[name].synchronize()
            want = base.sum(axis=0).astype(base.dtype)
            if got.dtype != want.dtype or not np.array_equal(got, want):
                failures.append(f"{name} {base.dtype} size {base.shape[1]}: differs")
    assert_everywhere(failures)


def test_average_and_ops_in_the_segment():
    failures = []
    for op, fn in [(hvd.Average, lambda a: a.mean(axis=0)), (hvd.Max, lambda a: a.max(axis=0)),
                   (hvd.Min, lambda a: a.min(axis=0)), (hvd.Product, lambda a: a.prod(axis=0))]:
        base = (np.arange(N * 50).reshape(N, 50) % 3 + 1).astype(np.float64)
        hs = [hvd.allreduce_async(base[RANK].copy(), op=op, name=f"op{int(op)}.{k}")
              for k in range(4)]
        for h in hs:
            got = h.synchronize()
            if not np.allclose(got, fn(base)):
                failures.append(f"{op.name}: {got[:4]} != {fn(base)[:4]}")
    assert_everywhere(failures)


SEG = INFO["segment_bytes"] or (1 << 20)


@pytest.mark.parametrize("nbytes", [0, 1, 4096, SEG - 1, SEG + 1, 3 * SEG + 5, 5 << 20])
def test_broadcast_and_allgather_through_the_segment(nbytes):
    """One node: broadcast and allgather copy through the segment, segment by segment (sizes
    around the segment's edge); rows differ by rank, so the counts are exchanged too."""
    failures = []
    for root in range(N):
        x = (np.arange(nbytes, dtype=np.uint8) * (root + 3)) if RANK == root else \
            np.zeros(nbytes, np.uint8)
        got = hvd.broadcast(x, root_rank=root, name=f"shm.b.{nbytes}")
        want = np.arange(nbytes, dtype=np.uint8) * (root + 3)
        if not np.array_equal(got, want):
            failures.append(f"broadcast of {nbytes} B from {root}: differs")
    for step in range(2):               # the second time through the response cache
        rows = [max(0, nbytes // 4 - r * 7) if step == 0 else nbytes // 4 for r in range(N)]
        mine = np.arange(rows[RANK] * 2, dtype=np.int16).reshape(rows[RANK], 2) + RANK
        got = hvd.allgather(mine, name=f"shm.g.{nbytes}.{step}")
        want = np.concatenate([np.arange(rows[r] * 2, dtype=np.int16).reshape(rows[r], 2) + r
                               for r in range(N)])
        if got.shape != want.shape or not np.array_equal(got, want):
            failures.append(f"allgather of rows {rows} (step {step}): {got.shape} != {want.shape}")
    assert_everywhere(failures)


def test_large_broadcasts_hand_over_to_mpi():
    """From 16 MiB (SHM_COPY_MAX, shm/copy.pxd) a broadcast goes through MPI_Bcast, every rank
    alike: just past it, from every root."""
    failures = []
    nbytes = (16 << 20) + 12
    for root in range(N):
        x = (np.arange(nbytes // 4, dtype=np.int32) * (root + 3)) if RANK == root else \
            np.zeros(nbytes // 4, np.int32)
        got = hvd.broadcast(x, root_rank=root, name="shm.b.large")
        if not np.array_equal(got, np.arange(nbytes // 4, dtype=np.int32) * (root + 3)):
            failures.append(f"broadcast of {nbytes} B from {root}: differs")
    assert_everywhere(failures)


RS_OPS = [(hvd.Sum, lambda a: a.sum(axis=0)), (hvd.Min, lambda a: a.min(axis=0)),
          (hvd.Max, lambda a: a.max(axis=0)), (hvd.Product, lambda a: a.prod(axis=0)),
          (hvd.Average, lambda a: a.sum(axis=0) / N)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64,
                                   np.uint8])
def test_reducescatter_every_dtype_and_op(dtype):
    """reducescatter on one node reduces through the segment (elsewhere through MPI): every op
    against NumPy on the gathered inputs, rows the set does not divide (fewer rows than ranks
    too), small values so every dtype holds the exact result."""
    failures = []
    for rows in (0, 1, 5, 2 * N + 1):
        base = (np.arange(N * rows * 3).reshape(N, rows, 3) % 3 + 1).astype(dtype)
        lo = sum(rows // N + (q < rows % N) for q in range(RANK))
        mine = rows // N + (RANK < rows % N)
        for op, fn in RS_OPS:
            if op is hvd.Average and not np.issubdtype(dtype, np.floating):
                continue
            got = hvd.reducescatter(base[RANK], op=op, name=f"rs.{rows}.{int(op)}")
            want = fn(base.astype(np.float64))[lo:lo + mine].astype(dtype)
            if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
                failures.append(f"{np.dtype(dtype).name} {op.name} rows {rows}: {got} != {want}")
    assert_everywhere(failures)


@pytest.mark.parametrize("nbytes", [4096, SEG + 1, 3 * SEG + 5])
def test_reducescatter_across_many_rounds(nbytes):
    """Blocks larger than a slot's part go through in rounds (one part per destination rank per
    round): float results against NumPy, Sum and Average, in the blocks Horovod assigns."""
    failures = []
    rows = nbytes // 8 + 1
    rng = np.random.default_rng(5)
    base = rng.integers(-99, 99, size=(N, rows, 2)).astype(np.float32)   # the same everywhere
    lo = sum(rows // N + (q < rows % N) for q in range(RANK))
    mine = rows // N + (RANK < rows % N)
    for op, want in ((hvd.Sum, base.sum(0)), (hvd.Average, base.sum(0) / N)):
        got = hvd.reducescatter(base[RANK], op=op, name=f"rs.big.{nbytes}.{int(op)}")
        if got.shape != (mine, 2) or not np.array_equal(got, want[lo:lo + mine].astype(np.float32)):
            failures.append(f"{op.name} of {nbytes} B: differs from NumPy")
    assert_everywhere(failures)


@pytest.mark.parametrize("nbytes", [0, 64, 4096, SEG - 1, SEG + 1, 3 * SEG + 5, 5 << 20])
def test_alltoall_through_the_segment(nbytes):
    """alltoall on one node copies through the segment: parts from empty to several slots long,
    splits that differ by rank and destination (zeros among them), equal parts, rows of 12 bytes;
    the second and third calls of a name through the response cache, the third with rows that
    differ from rank 0's (the cached slot is dropped on every rank)."""
    failures = []
    unit = max(1, nbytes // 12 // max(1, N))

    def splits_of(r, even):
        return [unit] * N if even else [(unit * (1 + (r + 2 * j) % 3)) if (r + j) % 4 else 0
                                        for j in range(N)]

    def rows_of(r, j, even):        # what rank r sends rank j: values name both
        before = sum(splits_of(r, even)[:j])
        k = splits_of(r, even)[j]
        return (np.arange(before, before + k, dtype=np.int32)[:, None] * 3
                + np.array([r, j, 7], np.int32))

    for step, even in enumerate((True, True, False, True)):
        x = np.concatenate([rows_of(RANK, j, even) for j in range(N)])
        x = x.reshape(-1, 3)
        if even:
            got = hvd.alltoall(x, name=f"a2a.{nbytes}")
            recv = [unit] * N
        else:
            got, recv = hvd.alltoall(x, splits=splits_of(RANK, even), name=f"a2a.{nbytes}")
        want = np.concatenate([rows_of(r, RANK, even) for r in range(N)]).reshape(-1, 3)
        want_recv = [splits_of(r, even)[RANK] for r in range(N)]
        if list(recv) != want_recv:
            failures.append(f"{nbytes} B step {step}: received splits {list(recv)} != {want_recv}")
        if got.shape != want.shape or not np.array_equal(got, want):
            failures.append(f"{nbytes} B step {step}: {got.shape} differs from {want.shape}")
    assert_everywhere(failures)


DIRECT = INFO["direct"] and N > 1
DIRECT_MIN = 16 << 10       # DIRECT_COPY_MIN (shm/copy.pxd)


def _read_direct():
    return hvd._current().global_state.coordinator.shm_waits()["read_direct"]


def test_peers_read_large_parts_straight_from_the_sender():
    """Where the node's ranks may read each other (shm_info()["direct"]), an allgather block or
    an alltoall part large enough stays in its sender's buffer and the peers read it there;
    smaller ones still go through the slots, in the same call. Every mix against
    NumPy: allgathers where some ranks send a large block and others a few rows (or none);
    alltoalls where one rank sends a part larger than a slot's share (round 1 of it from its
    slot, the rest read; with 4 ranks on 64 KiB slots) while the others' parts are small, and
    the reverse; broadcasts beside them (never read); each twice, the second time through the
    response cache (where small calls ride with the vote and large ones must not). Counts the
    calls that read directly: exactly the large ones where the kernel allows it (allgathers on
    two-rank nodes only), none where it does not."""
    failures = []
    before = _read_direct()
    large = 0
    for _ in range(2):              # the second time through the response cache
        for k, rows in enumerate(([DIRECT_MIN // 4 + 3 if r % 2 == 0 else 5 for r in range(N)],
                                  [0 if r % 2 == 0 else 3 * DIRECT_MIN // 4 + 1 for r in range(N)],
                                  [DIRECT_MIN // 4 - 1] * N,
                                  [(r + 1) * SEG // 4 + r for r in range(N)])):
            mine = (np.arange(rows[RANK], dtype=np.int32) * 5 + RANK * 1000003)
            got = hvd.allgather(mine, name=f"dr.g.{k}")
            want = np.concatenate([np.arange(rows[r], dtype=np.int32) * 5 + r * 1000003
                                   for r in range(N)])
            if not np.array_equal(got, want):
                failures.append(f"allgather of rows {rows}: differs from NumPy")
            large += max(rows) * 4 >= DIRECT_MIN and hvd.local_size() == 2   # (copy.pxd)
        # int32 elements: past a slot's share; and (with 4 ranks on 64 KiB slots) past it while
        # the sender's whole is too small to be read, so it goes in its slot and the rest is read
        big = max(DIRECT_MIN * N * N, (SEG * 5) // 4) // 4 + 7
        mid = 5000
        for k, (sender, heavy_part) in enumerate(((0, big), (N - 1, big), (0, mid))):
            for reverse in (False, True):
                # splits[r][j]: what rank r sends rank j. The sender sends a heavy part to one
                # rank, a few rows to the others; the reverse: the sender little, the others a lot.
                def part(r, j):
                    heavy = (r == sender) != reverse
                    return heavy_part if heavy and j == (r + 1) % N else (j + 2 * r) % 3
                splits = [part(RANK, j) for j in range(N)]
                x = np.concatenate([np.arange(part(RANK, j), dtype=np.int32) * 7 + RANK * 100 + j
                                    for j in range(N)])
                got, recv = hvd.alltoall(x, splits=splits, name=f"dr.a.{k}.{reverse}")
                want = np.concatenate([np.arange(part(r, RANK), dtype=np.int32) * 7 + r * 100 + RANK
                                       for r in range(N)])
                if list(recv) != [part(r, RANK) for r in range(N)] or not np.array_equal(got, want):
                    failures.append(f"alltoall, sender {sender}, part {heavy_part}, reverse "
                                    f"{reverse}: differs")
                # (direct_parts, copy.pxd: (N - 1) x DIRECT_MIN a part; or a part past a slot's)
                large += heavy_part * 4 >= N * (N - 1) * DIRECT_MIN or heavy_part * 4 > SEG // N
        for nbytes in (DIRECT_MIN, 3 * SEG + 5):     # never read (copy.pyx): still exact
            for root in range(N):
                want = (np.arange(nbytes, dtype=np.uint8) * (root + 5))
                x = want.copy() if RANK == root else np.zeros(nbytes, np.uint8)
                got = hvd.broadcast_(x, root_rank=root, name=f"dr.b.{nbytes}")
                if not np.array_equal(got, want):
                    failures.append(f"broadcast of {nbytes} B from {root}: differs")
    counted = _read_direct() - before
    if DIRECT and counted != large:
        failures.append(f"rank {RANK}: {counted} calls read a peer directly, not the {large} "
                        f"large ones")
    if not DIRECT and counted:
        failures.append(f"rank {RANK}: {counted} calls read a peer without the kernel's leave")
    assert_everywhere(failures)


def test_large_gathered_results_are_reused_only_when_nobody_holds_them():
    """allgather and alltoall write a name's result into its pooled array from the third call
    on (hvlite/outputs.py): a result the caller still holds is never overwritten, and a call
    whose rows differ from the pooled array's gets a new one of the right size."""
    failures = []
    rows = (1 << 16) // 4 // N * N + N          # past the pool's 16 KiB, divisible by N
    for kind in ("allgather", "alltoall"):
        held = []
        for step in range(6):
            mine = rows + (RANK * 3 if step == 4 else 0)     # step 4: rows differ by rank
            x = np.full((mine, 1), step * 100 + RANK, np.float32)
            if kind == "allgather":
                got = hvd.allgather(x, name="pool.ag")
                want = np.concatenate([np.full((rows + (r * 3 if step == 4 else 0), 1),
                                               step * 100 + r, np.float32) for r in range(N)])
            elif step == 4:
                splits = [mine // N] * (N - 1) + [mine - mine // N * (N - 1)]
                got, _ = hvd.alltoall(x, splits=splits, name="pool.aa")
                want = np.concatenate([np.full(((rows + r * 3) // N if RANK < N - 1 else
                                                rows + r * 3 - (rows + r * 3) // N * (N - 1), 1),
                                               step * 100 + r, np.float32) for r in range(N)])
            else:
                got = hvd.alltoall(x, name="pool.aa")
                want = np.concatenate([np.full((rows // N, 1), step * 100 + r, np.float32)
                                       for r in range(N)])
            if got.shape != want.shape or not np.array_equal(got, want):
                failures.append(f"{kind} step {step}: {got.shape} differs from {want.shape}")
            if step % 2:
                held.append((step, got, want))          # kept: must never change
        for step, got, want in held:
            if not np.array_equal(got, want):
                failures.append(f"{kind}: the result of step {step}, still held, was overwritten")
    assert_everywhere(failures)


def _one_bad_call(name, hook, expect, what, failures):
    """One shm all-reduce of 1 MiB with a test hook set (hook(True)) fails on every rank with
    `expect` in its message; with the hook unset again, the next call under the name is right."""
    x = np.full((1 << 20) // 4, RANK + 1, np.float32)
    hook(True)
    try:
        got = hvd.allreduce(x, op=hvd.Sum, name=name, algorithm="shm")
        failures.append(f"rank {RANK}: {what} went through: {got[:3]}")
    except hvd.HvliteError as e:
        if expect not in str(e):
            failures.append(f"rank {RANK}: {type(e).__name__}: {e}")
    finally:
        hook(False)
    got = hvd.allreduce(x, op=hvd.Sum, name=name, algorithm="shm")
    if not np.all(got == N * (N + 1) / 2):
        failures.append(f"rank {RANK}: after it {got[:3]}")


def test_a_peers_table_that_does_not_match_fails_the_call_everywhere():
    """The direct all-reduce reads and writes where the peers' tables say. A table that lays
    the batch out otherwise than this rank's own pieces (damaged shared memory; a test hook
    skews the last rank's) fails the call on every rank, before any byte moves; the next
    call, with the tables right, runs."""
    if not DIRECT:
        pytest.skip("no direct reads here")
    from hvlite._core.shm import cma
    failures = []
    _one_bad_call("d.skew", lambda on: cma._skew_table(1 if on and RANK == N - 1 else 0),
                  "table in the shared segment", "a skewed table", failures)
    assert_everywhere(failures)


def test_an_address_near_the_top_is_not_written_through_a_peers_arena():
    """Where a peer's output lies in its arena, mapped here, this rank stores into it itself,
    after checking that the address lies inside. The address comes from shared memory; near
    2**64 the check's sum wrapped and passed, and the store went anywhere in this process. With
    every push sent there (a test hook), the check now refuses it, the kernel's write fails, and
    the call fails on every rank; the next call runs."""
    if not DIRECT:
        pytest.skip("no direct reads here")
    from hvlite._core.shm import cma
    x = np.full((1 << 20) // 4, RANK + 1, np.float32)
    coord, failures = hvd._current().global_state.coordinator, []
    coord._scale_way("slots", 50.0)     # until the segment takes the direct way for 1 MiB
    try:
        for k in range(100):    # (from the name's second call its output lies in the arena)
            way = coord.shm_ways().get(1 << 20)
            if k >= 2 and (os.environ.get("HVLITE_CALIBRATE") == "0" or (
                    way and way["pick"] == "direct" and way["challenging"] is None)):
                break
            hvd.allreduce(x, op=hvd.Sum, name="d.top", algorithm="shm")
        _one_bad_call("d.top", lambda on: cma._push_to((1 << 64) - 4096 if on and RANK == 0
                                                       else 0),
                      "shared-memory", "a push to the top of memory", failures)
    finally:
        coord._scale_way("slots", 1.0)
    assert_everywhere(failures)


def test_direct_reads_give_every_rank_the_same_bits():
    """Reading the peers' buffers directly (the default on one node, where the kernel allows
    it): floats whose sum depends on the order come out bit for bit the same on every rank and
    close to NumPy's, through batches of a thousand one-element tensors (more buffers per
    kernel read than one call takes) and one large tensor, in place and out of place, and a
    batch mixing both (each chunk's result is written into every peer's outputs)."""
    if os.environ.get("HVLITE_SHM_DIRECT") == "0" or not ENABLED:
        assert not INFO["direct"], INFO
    rng = np.random.default_rng(11)
    base = rng.standard_normal((N, 1000)).astype(np.float32)      # the same on every rank
    big = rng.standard_normal((N, 300001)).astype(np.float32)
    inplace = big[RANK].copy()
    for attempt in range(2):        # the first time every name goes to rank 0; then one batch
        tinies = [base[RANK, i:i + 1].copy() for i in range(1000)]
        handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=f"d.{i}") for i, t in enumerate(tinies)]
        inplace[:] = big[RANK]
        handles.append(hvd.allreduce_async_(inplace, op=hvd.Sum, name="d.big"))
        for h in handles:
            h.synchronize()
    tiny = np.concatenate(tinies)
    outplace = hvd.allreduce(big[RANK], op=hvd.Sum, name="d.big.out",
                             algorithm="shm" if ENABLED else None)
    # out of place, each rank's inputs and the first peer's reduced into its outputs in one
    # pass: another op, and Average's divide on the outputs
    outmax = hvd.allreduce(big[RANK], op=hvd.Max, name="d.big.max",
                           algorithm="shm" if ENABLED else None)
    outavg = hvd.allreduce(big[RANK], op=hvd.Average, name="d.big.avg",
                           algorithm="shm" if ENABLED else None)
    # Past SHM_STREAM_MIN (8 MiB) new outputs are written past the cache; from a name's second call
    # on they lie in the pool's arena, which the peers write into themselves.
    huge = rng.standard_normal((N, (9 << 20) // 4 + 3)).astype(np.float32)
    for attempt in range(3):
        streamed = hvd.allreduce(huge[RANK], op=hvd.Average, name="d.huge.out",
                                 algorithm="shm" if ENABLED else None)
        streamed_sum = hvd.allreduce(huge[RANK], op=hvd.Sum, name="d.huge.sum",
                                     algorithm="shm" if ENABLED else None)
    parts = np.array_split(big[RANK], 7)        # odd sizes; every other one in place
    mixed = [p.copy() for p in parts]
    for attempt in range(2):
        handles = [(hvd.allreduce_async_ if i % 2 else hvd.allreduce_async)(
                   m if i % 2 else p, op=hvd.Sum, name=f"d.mix.{i}")
                   for i, (p, m) in enumerate(zip(parts, mixed))]
        if attempt == 0:
            for h in handles:
                h.synchronize()
            mixed = [p.copy() for p in parts]
    mixed = [h.synchronize() if i % 2 == 0 else m for i, (h, m) in enumerate(zip(handles, mixed))]
    # a batch of outputs from the pool's smallest (16 KiB) up, and some below it: from a name's
    # second call on the larger ones lie in the arena, each peer writing its share there itself
    # beside the kernel's writes into the heap's
    lengths = [4096 + (i % 5) * 997 if i % 4 else 700 for i in range(60)]
    starts = np.cumsum([0] + lengths)
    pieces = [big[RANK, starts[i]:starts[i + 1]] for i in range(len(lengths))]
    for attempt in range(3):
        handles = [hvd.allreduce_async(p, op=hvd.Sum, name=f"d.small.{i}",
                                       algorithm="shm" if ENABLED else None)
                   for i, p in enumerate(pieces)]
        smalls = [h.synchronize() for h in handles]
    failures = []
    if ENABLED and hvd._current().global_state.coordinator.outputs_shared():
        from hvlite._core.shm.arena import shared
        lo, cap = shared().address, shared().cap
        inside = [lo <= s.ctypes.data < lo + cap for s in smalls]
        if inside != [s.nbytes >= (16 << 10) for s in smalls]:
            failures.append(f"rank {RANK}: outputs in the arena {inside}, not those from 16 KiB")
    for what, got, want in (("tiny", tiny, base.sum(0)), ("in place", inplace, big.sum(0)),
                            ("out of place", outplace, big.sum(0)),
                            ("out of place, Max", outmax, big.max(0)),
                            ("out of place, Average", outavg, big.sum(0) / N),
                            ("mixed batch", np.concatenate(mixed), big.sum(0)),
                            ("small outputs", np.concatenate(smalls), big.sum(0)[:starts[-1]]),
                            ("streamed", streamed, huge.sum(0) / N),
                            ("streamed, Sum", streamed_sum, huge.sum(0))):
        if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
            failures.append(f"rank {RANK}: {what} differs from NumPy")
        every = MPI.COMM_WORLD.allgather(got.tobytes())
        if any(b != every[0] for b in every):
            failures.append(f"rank {RANK}: {what} is not bit for bit the same on every rank")
    if ENABLED and hvd.local_size() == N:
        # one node: every element is the ranks' inputs added in rank order, whichever way the
        # segment went and whichever rank reduced it (each rank folds its own inputs in where
        # they come, with no copy of them first)
        for what, got, rows in (("out of place", outplace, big), ("streamed, Sum", streamed_sum, huge),
                                ("small outputs", np.concatenate(smalls), big[:, :starts[-1]])):
            ordered = rows[0].copy()
            for r in range(1, N):
                ordered += rows[r]
            if got.tobytes() != ordered.tobytes():
                failures.append(f"rank {RANK}: {what} is not the rank-order sum bit for bit")
    assert_everywhere(failures)


@pytest.mark.skipif(not ENABLED, reason="no segment with HVLITE_SHM=0")
def test_a_joined_rank_adds_the_identity_through_the_slots():
    """A joined rank has no buffers, so a batch goes through the slots, and that rank reduces
    its slice of it too, its own part the op's identity (Horovod: it adds zeros). Every element is
    the ranks' parts added in rank order, the joined rank's +0.0 among them, bit for bit: where
    every other rank has -0.0, the sum is +0.0 only if the identity was added, not skipped."""
    if N < 2 or hvd.local_size() != N:
        pytest.skip("needs a rank to join, on one node")
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((N, 3, 40000)).astype(np.float32)    # past the redundant limit
    rows[:, :, ::7] = -0.0
    failures = []
    if RANK == N - 1:
        hvd.join()
    else:
        handles = [hvd.allreduce_async(rows[RANK, k], op=hvd.Sum, name=f"j.slots.{k}",
                                       algorithm="shm") for k in range(3)]
        got = [h.synchronize() for h in handles]
        hvd.join()
        want = rows[0].copy()
        for r in range(1, N):
            want += rows[r] if r != N - 1 else np.zeros_like(rows[r])
        for k in range(3):
            if got[k].tobytes() != want[k].tobytes():
                bad = np.flatnonzero(got[k].view(np.uint32) != want[k].view(np.uint32))
                failures.append(f"rank {RANK}: tensor {k} differs at {bad.size} elements, "
                                f"first {bad[:3]}: {got[k][bad[:3]]} against {want[k][bad[:3]]}")
    assert_everywhere(failures)


@pytest.mark.skipif(not ENABLED, reason="no segment with HVLITE_SHM=0")
def test_a_rank_asleep_in_a_barrier_is_woken_by_the_late_one():
    """A rank that reaches the segment's barrier long before the last one spins, yields, then
    sleeps on the late rank's epoch word; the late rank wakes it when it arrives (a wait that
    only timed out would come back up to a poll interval late). The late rank holds back until
    every peer is counted asleep on it (an event, not a guessed time); counted, not timed: it
    must find them and wake them every time, and without the wake every sleep runs out its
    time and `woken` stays where it was."""
    if not INFO["available"]:
        pytest.skip(f"no segment: {INFO['why']}")
    if N < 2:
        pytest.skip("one rank: nobody waits")
    if INFO["ranks"] != N:      # the same answer on every rank
        pytest.skip("across nodes the round's agreement waits in MPI, not in the segment")
    coord = hvd._current().global_state.coordinator
    late = N - 1
    x = np.ones(16, np.float32)
    hvd.allreduce_(x, op=hvd.Sum, name="late.call")
    before = coord.shm_waits()
    failures = []
    for attempt in range(5):
        MPI.COMM_WORLD.Barrier()
        if RANK == late:
            deadline = time.monotonic() + 60
            while coord._sleepers() < N - 1:
                if time.monotonic() > deadline:        # then call anyway: nobody is left waiting
                    failures.append(f"rank {RANK}: only {coord._sleepers()} of {N - 1} peers "
                                    "ever slept on its barrier")
                    break
                time.sleep(1e-3)
        x[:] = RANK
        hvd.allreduce_(x, op=hvd.Sum, name="late.call")
        if not np.array_equal(x, np.full(16, N * (N - 1) / 2, np.float32)):
            failures.append(f"rank {RANK}: attempt {attempt} gave {x[:3]}")
    after = coord.shm_waits()
    got = {k: after[k] - before[k] for k in after}
    if RANK == late and got["woke"] < 5:
        failures.append(f"rank {RANK}: arrived last 5 times to sleeping peers, woke them {got}")
    if RANK != late and (got["slept"] < 5 or got["woken"] < 1):
        failures.append(f"rank {RANK}: waited 5 times for the late rank: {got}")
    assert_everywhere(failures)
