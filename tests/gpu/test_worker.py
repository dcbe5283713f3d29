"""The device worker's bookkeeping that needs no GPU: staging slots that outlive a job, and host
buffers held until the asynchronous copy that reads them is done."""
import weakref

import numpy as np

from fake_engine import FakeEngine
from hvlite.gpu.worker import DeviceWorker


def test_held_buffers_go_only_once_their_copies_are_done():
    eng = FakeEngine(np.random.default_rng(0))
    eng._some = lambda: None            # queued copies run only when the host waits
    w = DeviceWorker(99)
    try:
        s = eng.new_stream()
        dev = np.zeros(64, np.uint8)
        refs = []
        for k in range(3):
            host = np.full(64, k, np.uint8)
            eng.h2d(dev, 0, host, 64, s)
            w.hold(eng, eng.record(s), host)
            refs.append(weakref.ref(host))
            del host                    # the caller lets go: only the worker holds it now
        assert len(w.held) == 3 and all(r() is not None for r in refs)
        eng.sync(w.held[0][1])          # the first copy done: only its buffer may go
        w.reap()
        assert len(w.held) == 2 and refs[0]() is None and refs[2]() is not None
        eng.drain()
        w.reap()
        assert len(w.held) == 0 and all(r() is None for r in refs) and (dev == 2).all()
    finally:
        w.stop()


def test_stop_waits_for_the_copies_it_still_holds():
    eng = FakeEngine(np.random.default_rng(2))
    eng._some = lambda: None
    w = DeviceWorker(97)
    s = eng.new_stream()
    dev = np.zeros(8, np.uint8)
    eng.h2d(dev, 0, np.full(8, 5, np.uint8), 8, s)
    w.hold(eng, eng.record(s))
    w.stop()
    w.thread.join(timeout=30)
    assert not w.thread.is_alive() and len(w.held) == 0 and (dev == 5).all()


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
