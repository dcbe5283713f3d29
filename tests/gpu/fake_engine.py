"""A CPU stand-in for CUDA streams and events, for checking the staging schedule.

Work queued on a stream runs late, in issue order per stream, with streams interleaved at
random: an op runs only when the engine is touched (record, query, sync) and a random number of
queued ops are run each time. A schedule that forgets a wait then reads stale or half-written
host buffers on some interleavings, which the tests see as wrong results or hazard reports.
There is no device-wide synchronize: a pipeline that needs one fails with AttributeError.
"""
import collections

import numpy as np

from hvlite.gpu.copy_engine import CopyEngine


class Event:
    def __init__(self):
        self.done = False


class Hazard(AssertionError):
    pass


class FakeEngine(CopyEngine):
    def __init__(self, rng, caller=None):
        self.rng = rng
        self.queues = collections.OrderedDict()
        self.caller = self.new_stream()
        self.log = []                      # (op, stream, details) in execution order
        self.busy = {}                     # id(host slot base) -> what holds it
        self.host_syncs = 0

    # -- the interface ---------------------------------------------------------------------
    def current_stream(self):
        return self.caller

    def new_stream(self):
        sid = len(self.queues)
        self.queues[sid] = collections.deque()
        return sid

    def record(self, stream):
        ev = Event()
        self.queues[stream].append(("record", ev))
        self._some()
        return ev

    def wait(self, stream, event):
        self.queues[stream].append(("wait", event))

    def sync(self, event):
        self.host_syncs += 1
        while not event.done:
            if not self._run_one():
                raise Hazard("deadlock: host waits on an event no stream can reach")

    def query(self, event):
        self._some()
        return event.done

    def pinned(self, nbytes):
        return np.zeros(nbytes, np.uint8)

    def d2h(self, host, dev, offset, nbytes, stream):
        self.queues[stream].append(("d2h", host, dev, offset, nbytes))
        self._some()

    def h2d(self, dev, offset, host, nbytes, stream):
        self.queues[stream].append(("h2d", dev, offset, host, nbytes))
        self._some()

    def kernel(self, stream, fn):
        """Work the caller queued on its stream (e.g. the kernel that produced the input)."""
        self.queues[stream].append(("kernel", fn))

    # -- execution -------------------------------------------------------------------------
    def _runnable(self):
        out = []
        for sid, q in self.queues.items():
            if q and not (q[0][0] == "wait" and not q[0][1].done):
                out.append(sid)
        return out

    def _run_one(self):
        ready = self._runnable()
        if not ready:
            return False
        sid = ready[self.rng.integers(len(ready))]
        op = self.queues[sid].popleft()
        kind = op[0]
        if kind == "record":
            op[1].done = True
        elif kind == "kernel":
            op[1]()
        elif kind == "d2h":
            _, host, dev, off, n = op
            holder = self.busy.get(_base(host))
            if holder is not None:
                raise Hazard(f"d2h into a host slot still held by {holder}")
            host[:n] = dev[off:off + n]
        elif kind == "h2d":
            _, dev, off, host, n = op
            dev[off:off + n] = host[:n]
            if self.busy.get(_base(host), "").startswith("result"):
                del self.busy[_base(host)]
        self.log.append((kind, sid))
        return True

    def _some(self):
        for _ in range(self.rng.integers(0, 3)):
            self._run_one()

    def drain(self):
        while self._run_one():
            pass


def _base(a):
    while a.base is not None and isinstance(a.base, np.ndarray):
        a = a.base
    return id(a)


class FakeCollective:
    """An in-place host collective: snapshot at start, result (x * 3 + 1, per byte mod 256)
    written into the slot when synchronized, after some engine progress. Marks the slot held
    from start until the h2d copy that reads its result has run."""

    def __init__(self, engine, expected, max_in_flight):
        self.engine, self.expected, self.max = engine, expected, max_in_flight
        self.in_flight = 0
        self.peak = 0
        self.started = []

    def __call__(self, i, slot, size):
        off = sum(s for s in self.started)
        got = slot[:size].copy()
        want = self.expected[off:off + size]
        if not np.array_equal(got, want):
            raise Hazard(f"chunk {i}: the collective read a slot whose d2h copy had not landed")
        self.started.append(size)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight > self.max:
            raise Hazard(f"{self.in_flight} chunks in flight, more than {self.max}")
        self.engine.busy[_base(slot)] = f"collective {i}"
        return _Handle(self, i, slot, size, got)


class _Handle:
    def __init__(self, coll, i, slot, size, data):
        self.coll, self.i, self.slot, self.size, self.data = coll, i, slot, size, data

    def synchronize(self):
        self.coll.engine._some()
        self.slot[:self.size] = (self.data.astype(np.uint16) * 3 + 1).astype(np.uint8)
        self.coll.engine.busy[_base(self.slot)] = f"result {self.i} (until its h2d runs)"
        self.coll.in_flight -= 1
