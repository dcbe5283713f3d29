"""Host staging for MPI libraries that cannot read device memory: a chunked pipeline.

A device buffer is reduced (or broadcast) chunk by chunk through `depth` pinned host slots
(two: double buffering). While chunk i is copied device->host, chunk i-1's collective runs on
the coordinator thread; while chunk i's collective runs, chunk i-1's result is copied back on a
second stream. Hazards the schedule rules out (and tests/gpu check with a fake engine):

* a slot is refilled only after the previous occupant's host->device copy has read it (a
  device-side stream wait on that copy's event, no host block), the previous job's too;
* a chunk's collective starts only once its device->host copy has landed (host waits on that
  event only, never on the whole device);
* a chunk's result is copied back only after its collective finished;
* at most `depth` chunks hold slots at a time, and the input is read only after the caller's
  stream reached the submit point (the d2h stream waits on the event recorded there).
"""
import collections


def chunks(nbytes, chunk_bytes, itemsize):
    """(offset, size) pairs covering nbytes, each a whole number of elements."""
    step = max(itemsize, chunk_bytes - chunk_bytes % itemsize)
    return [(off, min(step, nbytes - off)) for off in range(0, nbytes, step)]


def run_chunked(engine, src, dst, nbytes, chunk_bytes, itemsize, start, after, streams, slots,
                freed=None):
    """Run `start(i, host_slot, size)` (which returns a handle with synchronize(), working in
    place on host_slot[:size]) over every chunk of src, writing the results to dst. `after`: the
    event recorded on the caller's stream at submit. Returns the event after which dst is
    complete (on the h2d stream); the host does not wait for it.

    `freed`: per slot, the event of the h2d copy that last read it, kept by the caller for the
    slots' next job (updated here): slots outlive a job, and the next job's first copies into
    them must wait for this job's last copies out of them, which the host never waited for."""
    d2h_stream, h2d_stream = streams
    depth = len(slots)
    engine.wait(d2h_stream, after)
    if freed is None:
        freed = [None] * depth
    pending = collections.deque()

    def finish(item):
        i, handle, s, off, size = item
        handle.synchronize()
        engine.h2d(dst, off, slots[s], size, h2d_stream)
        freed[s] = engine.record(h2d_stream)

    try:
        for i, (off, size) in enumerate(chunks(nbytes, chunk_bytes, itemsize)):
            s = i % depth
            if freed[s] is not None:
                engine.wait(d2h_stream, freed[s])
            engine.d2h(slots[s], src, off, size, d2h_stream)
            engine.sync(engine.record(d2h_stream))
            pending.append((i, start(i, slots[s], size), s, off, size))
            while len(pending) >= depth:
                finish(pending.popleft())
        while pending:
            finish(pending.popleft())
    except BaseException:
        # a chunk failed: the others' collectives may still write their slots, which the next
        # job refills; wait for every one (their own failures are this one's)
        for item in pending:
            try:
                item[1].synchronize()
            except BaseException:        # noqa: BLE001 - the first failure is raised below
                pass
        raise
    return engine.record(h2d_stream)


def stage_in(engine, src, nbytes, host, chunk_bytes, after, stream):
    """Copy a whole device buffer to host (for collectives whose result is not elementwise),
    in chunks so that a large copy does not hold the stream in one piece; waits for it."""
    engine.wait(stream, after)
    for off, size in chunks(nbytes, chunk_bytes, 1):
        engine.d2h(host[off:], src, off, size, stream)
    engine.sync(engine.record(stream))


def stage_out(engine, dst, host, nbytes, stream):
    """Queue the host result's copy to the device; returns the event that completes it."""
    engine.h2d(dst, 0, host, nbytes, stream)
    return engine.record(stream)
