"""The staging schedule, on a fake copy engine whose streams run late and interleaved at random."""
import numpy as np
import pytest

from hvlite.gpu import staging
from fake_engine import FakeCollective, FakeEngine, Hazard


def _run(seed, nbytes, chunk, depth=2, itemsize=4, schedule=staging.run_chunked):
    rng = np.random.default_rng(seed)
    eng = FakeEngine(rng)
    data = rng.integers(0, 256, nbytes, dtype=np.uint8)
    src = np.full(nbytes, 0xEE, np.uint8)        # stale until the caller's kernel runs
    dst = np.zeros(nbytes, np.uint8)
    eng.kernel(eng.caller, lambda: src.__setitem__(slice(None), data))
    after = eng.record(eng.caller)
    coll = FakeCollective(eng, data, depth)
    slots = [eng.pinned(chunk) for _ in range(depth)]
    done = schedule(eng, src, dst, nbytes, chunk, itemsize, coll, after,
                    (eng.new_stream(), eng.new_stream()), slots)
    eng.sync(done)
    return eng, coll, data, dst


@pytest.mark.parametrize("seed", range(40))
def test_pipeline_is_complete_in_order_and_hazard_free(seed):
    nbytes = [4, 4096, 4100, 10_000, 65_536][seed % 5]
    eng, coll, data, dst = _run(seed, nbytes, chunk=1024)
    want = (data.astype(np.uint16) * 3 + 1).astype(np.uint8)
    np.testing.assert_array_equal(dst, want)
    assert sum(coll.started) == nbytes
    assert coll.peak <= 2


def test_double_buffering_overlaps_and_is_bounded():
    _, coll, _, _ = _run(1, 10 * 1024, chunk=1024)
    assert coll.peak == 2 and len(coll.started) == 10


def test_chunks_hold_whole_elements():
    assert staging.chunks(10, 4, 4) == [(0, 4), (4, 4), (8, 2)]
    assert staging.chunks(24, 10, 8) == [(0, 8), (8, 8), (16, 8)]
    assert staging.chunks(8, 3, 8) == [(0, 8)]
    assert staging.chunks(0, 16, 4) == []


def test_the_host_never_blocks_the_whole_device():
    eng, *_ = _run(3, 8192, chunk=1024)
    assert not hasattr(eng, "synchronize") and not hasattr(eng, "device_synchronize")
    assert eng.host_syncs == 8 + 1     # one per chunk's d2h event, plus the test's final wait


def _without(line):
    """run_chunked with one line of the schedule removed, to show the tests catch it."""
    import inspect
    import textwrap
    src = textwrap.dedent(inspect.getsource(staging.run_chunked))
    assert line in src
    ns = dict(vars(staging))
    exec(src.replace(line, "pass"), ns)
    return ns["run_chunked"]


@pytest.mark.parametrize("line", [
    "engine.wait(d2h_stream, after)",                 # the caller's stream is not followed
    "engine.wait(d2h_stream, freed[s])",              # a slot refilled before its h2d read it
    "engine.sync(engine.record(d2h_stream))",         # MPI reads a slot before the copy lands
])
def test_a_broken_schedule_is_caught(line):
    broken = _without(line)
    caught = 0
    for seed in range(30):
        try:
            eng, coll, data, dst = _run(seed, 8192, chunk=1024, schedule=broken)
        except Hazard:
            caught += 1
            continue
        want = (data.astype(np.uint16) * 3 + 1).astype(np.uint8)
        caught += not np.array_equal(dst, want)
    assert caught > 0


def test_stage_in_and_out_follow_the_caller_stream():
    rng = np.random.default_rng(5)
    for _ in range(20):
        eng = FakeEngine(rng)
        data = rng.integers(0, 256, 5000, dtype=np.uint8)
        src = np.zeros(5000, np.uint8)
        eng.kernel(eng.caller, lambda: src.__setitem__(slice(None), data))
        host = eng.pinned(5000)
        s = eng.new_stream()
        staging.stage_in(eng, src, 5000, host, 1024, eng.record(eng.caller), s)
        np.testing.assert_array_equal(host, data)
        dst = np.zeros(5000, np.uint8)
        eng.sync(staging.stage_out(eng, dst, host, 5000, s))
        np.testing.assert_array_equal(dst, data)


def _two_jobs(seed, keep_freed):
    """Two jobs back to back on the same slots and streams, the host waiting for neither (a
    loop of staged all-reduces, or DistributedOptimizer's hooks): the second's copies into the
    slots must wait for the first's copies out of them."""
    rng = np.random.default_rng(seed)
    eng = FakeEngine(rng)
    if seed % 2:        # a lazier device: queued work runs only when the host waits on it
        eng._some = lambda: None
    streams, slots = (eng.new_stream(), eng.new_stream()), [eng.pinned(1024), eng.pinned(1024)]
    freed = [None, None] if keep_freed else None
    outs, wants = [], []
    for job in range(2):
        data = rng.integers(0, 256, 4096, dtype=np.uint8)
        src, dst = np.zeros(4096, np.uint8), np.zeros(4096, np.uint8)
        eng.kernel(eng.caller, lambda s=src, d=data: s.__setitem__(slice(None), d))
        coll = FakeCollective(eng, data, 2)
        outs.append((staging.run_chunked(eng, src, dst, 4096, 1024, 4, coll, eng.record(eng.caller),
                                         streams, slots, freed), dst))
        wants.append((data.astype(np.uint16) * 3 + 1).astype(np.uint8))
    for (done, dst), want in zip(outs, wants):
        eng.sync(done)
        np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("seed", range(20))
def test_back_to_back_jobs_on_the_same_slots(seed):
    _two_jobs(seed, keep_freed=True)


def test_slots_without_the_last_jobs_copies_are_caught():
    caught = 0
    for seed in range(100):
        try:
            _two_jobs(seed, keep_freed=False)
        except (Hazard, AssertionError):
            caught += 1
    assert caught > 0


def test_a_failed_chunk_waits_for_the_others_before_raising():
    """A chunk whose collective fails ends the job, but the chunks started after it still
    write their slots until they finish: the next job must not refill those slots meanwhile."""
    eng = FakeEngine(np.random.default_rng(4))
    started, synced = [], []

    class Handle:
        def __init__(self, i):
            self.i = i

        def synchronize(self):
            synced.append(self.i)
            if self.i == 0:
                raise RuntimeError("chunk 0 failed")

    def start(i, slot, size):
        started.append(i)
        return Handle(i)
    src, dst = np.zeros(4096, np.uint8), np.zeros(4096, np.uint8)
    with pytest.raises(RuntimeError, match="chunk 0 failed"):
        staging.run_chunked(eng, src, dst, 4096, 1024, 4, start, eng.record(eng.caller),
                            (eng.new_stream(), eng.new_stream()),
                            [eng.pinned(1024), eng.pinned(1024)])
    assert started == [0, 1] and sorted(synced) == started
