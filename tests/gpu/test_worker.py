"""The device worker's bookkeeping that needs no GPU: staging slots that outlive a job, and host
buffers held until the asynchronous copy that reads them is done."""
import numpy as np

from fake_engine import FakeEngine
from hvlite.gpu.worker import DeviceWorker


def test_held_buffers_go_only_once_their_copies_are_done():
    eng = FakeEngine(np.random.default_rng(0))
    w = DeviceWorker(99)
    try:
        s = eng.new_stream()
        dev = np.zeros(64, np.uint8)
        for k in range(3):
            host = np.full(64, k, np.uint8)
            eng.h2d(dev, 0, host, 64, s)
            w.hold(eng, eng.record(s), host)
        while len(w.held) and not eng.query(w.held[0][1]):
            assert w.held[0][2][0] is not None        # still referenced while in flight
            eng._run_one()
        eng.drain()
        w.reap()
        assert len(w.held) == 0 and (dev == 2).all()
    finally:
        w.stop()


def test_staging_slots_persist_with_their_freed_events():
    eng = FakeEngine(np.random.default_rng(1))
    w = DeviceWorker(98)
    try:
        slots, freed = w.staging_slots(eng, 1024)
        freed[0] = eng.record(eng.new_stream())
        again, freed2 = w.staging_slots(eng, 1024)
        assert again is slots and freed2 is freed and freed2[0] is not None
        bigger, freed3 = w.staging_slots(eng, 4096)     # replaced: the old events waited for
        assert len(bigger[0]) == 4096 and freed3 == [None, None] and freed[0].done
    finally:
        w.stop()
