"""The timeline: a Chrome trace of every collective, with the user's compute spans.

    hvlite.start_timeline("trace.json")          # or HVLITE_TIMELINE=trace.json
    with hvlite.timeline.span("backward/layer3"):
        ...
    hvlite.stop_timeline()

Then `hvlite-timeline summary trace.json` tells how much communication was hidden behind
compute, and `hvlite-timeline plot trace.json -o timeline.png` draws it. The coordinator records
one small struct per finished collective; a writer thread formats them (in C++, without the GIL)
every 200 ms, so tracing costs the training loop little.
"""
import contextlib
import os
import sys
import threading

from hvlite import runtime
from hvlite.errors import InvalidArgumentError

FLUSH_SECONDS = 0.2


class Timeline:
    """One open trace file and the thread that writes it."""

    def __init__(self, rt, path, mark_cycles, all_ranks):
        from hvlite._core.trace import now
        self.writer = rt.global_state.coordinator.writer()
        rank = rt.engine.rank
        self.path = path if rank == 0 else per_rank_path(path, rank)
        self.active = rank == 0 or all_ranks
        # One clock for every rank: each reads its clock as it leaves the same barrier.
        for _ in range(3):
            rt.comm.Barrier()
        origin = now()
        problem = None
        if self.active:
            try:
                self.writer.open(self.path, rank, origin, mark_cycles)
            except Exception as e:      # noqa: BLE001 - every rank is told, below
                problem = f"rank {rank} cannot write the trace to {self.path!r}: {e}"
        # every rank learns whether every writer opened: a rank left thinking the timeline
        # runs would see only a bare shutdown once the failing rank gives up
        problems = [p for p in rt.comm.allgather(problem) if p]
        if problems:
            if self.active and problem is None:
                self.writer.close()
            self.active = False
            raise InvalidArgumentError("start_timeline: " + "; ".join(problems))
        if not self.active:
            return
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="hvlite-timeline", daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop.wait(FLUSH_SECONDS):
            self.writer.flush()
            if self.writer.error:       # said now, raised at stop_timeline()
                print(f"hvlite: warning: {self._failed()}", file=sys.stderr, flush=True)
                return

    def _failed(self):
        return (f"writing the timeline {self.path!r} failed: {os.strerror(self.writer.error)}; "
                "recording stopped, and the trace ends at its last complete event")

    def stop(self):
        """Finish the file; an OSError if a write failed (the trace is cut short there)."""
        if self.active:
            self._stop.set()
            self.thread.join()
            self.writer.close()
            self.active = False
            if self.writer.error:
                raise OSError(self.writer.error, self._failed())


def per_rank_path(path, rank):
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank}{ext or '.json'}"


def start_timeline(file_path, mark_cycles=False, all_ranks=False):
    """Start writing a trace (rank 0 writes `file_path`; with all_ranks every rank r writes
    `<name>.rank<r><ext>` too). Call it on every rank: it aligns the ranks' clocks."""
    rt = runtime.current()
    if rt.timeline is not None:
        raise InvalidArgumentError(f"a timeline is already being written to {rt.timeline.path!r}; "
                                   "call stop_timeline() first")
    rt.timeline = Timeline(rt, str(file_path), mark_cycles, all_ranks)


def stop_timeline():
    """Finish the trace file (valid JSON from then on). Call it on every rank."""
    rt = runtime.current()
    tl, rt.timeline = rt.timeline, None
    if tl is not None:
        tl.stop()


def record_compute(start, end, name="compute"):
    """A compute span from `start` to `end` (trace.now() readings) on the compute row, when a
    timeline is being written: what the framework layers call where they know compute ran (the
    overlap report needs it; users of plain NumPy mark theirs with span())."""
    rt = runtime._current
    tl = rt.timeline if rt is not None else None
    if tl is not None and tl.active and end > start:
        tl.writer.span(name, start, end)


@contextlib.contextmanager
def span(name):
    """Mark a stretch of the user's compute on the timeline's compute row."""
    rt = runtime._current
    tl = rt.timeline if rt is not None else None
    if tl is None or not tl.active:
        yield
        return
    from hvlite._core.trace import now
    t0 = now()
    try:
        yield
    finally:
        tl.writer.span(str(name), t0, now())
