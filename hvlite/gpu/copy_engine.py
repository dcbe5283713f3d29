"""The copy engine: the few stream, event and copy operations the staging pipeline needs.

The pipeline (staging.py) talks only to this interface, so its ordering can be checked on the
CPU with a fake engine that runs each stream's work late and in random interleavings. CupyEngine
is the real one; nothing here imports CuPy before a CupyEngine is made.

Ordering rules the pipeline relies on, as on CUDA: work on one stream runs in issue order;
`wait(stream, event)` holds the stream's later work until the event's work is done, without
blocking the host; `sync(event)` blocks the host for that event only (never the whole device).
"""


class CopyEngine:
    """Interface. `dev` buffers are flat uint8 device arrays; `host` buffers are flat uint8
    NumPy arrays (pinned for the real engine)."""

    def current_stream(self):
        """The caller's current stream: the one whose queued work the collective must follow."""
        raise NotImplementedError

    def new_stream(self):
        raise NotImplementedError

    def record(self, stream):
        """An event marking the work queued on `stream` so far."""
        raise NotImplementedError

    def wait(self, stream, event):
        raise NotImplementedError

    def sync(self, event):
        raise NotImplementedError

    def query(self, event):
        """True once the event's work is done (does not block)."""
        raise NotImplementedError

    def pinned(self, nbytes):
        raise NotImplementedError

    def d2h(self, host, dev, offset, nbytes, stream):
        """Queue host[:nbytes] <- dev[offset:offset+nbytes] on `stream`."""
        raise NotImplementedError

    def h2d(self, dev, offset, host, nbytes, stream):
        """Queue dev[offset:offset+nbytes] <- host[:nbytes] on `stream`."""
        raise NotImplementedError


class CupyEngine(CopyEngine):
    """CUDA streams and events through CuPy; host buffers from CuPy's pinned memory pool."""

    def __init__(self, device_id=None):
        import cupy
        self.cp = cupy
        self.device = cupy.cuda.Device(device_id if device_id is not None else
                                       cupy.cuda.runtime.getDevice())

    def current_stream(self):
        return self.cp.cuda.get_current_stream()

    def new_stream(self):
        with self.device:
            return self.cp.cuda.Stream(non_blocking=True)

    def record(self, stream):
        with self.device:
            ev = self.cp.cuda.Event(block=False, disable_timing=True)
            ev.record(stream)
            return ev

    def wait(self, stream, event):
        stream.wait_event(event)

    def sync(self, event):
        event.synchronize()

    def query(self, event):
        return event.done

    def pinned(self, nbytes):
        import numpy as np
        mem = self.cp.cuda.alloc_pinned_memory(max(int(nbytes), 1))
        return np.frombuffer(mem, np.uint8, max(int(nbytes), 1))

    def d2h(self, host, dev, offset, nbytes, stream):
        if nbytes:
            dev[offset:offset + nbytes].get(stream=stream, out=host[:nbytes], blocking=False)

    def h2d(self, dev, offset, host, nbytes, stream):
        if nbytes:
            dev[offset:offset + nbytes].set(host[:nbytes], stream=stream)


def stream_of(described_stream, engine):
    """The caller's stream: the one named by __cuda_array_interface__ v3 (an int handle; 1 and
    2 are CUDA's legacy and per-thread default streams), or the current one."""
    if not described_stream:                  # none given
        return engine.current_stream()
    return external_stream(engine.cp, int(described_stream))


class _Handle:
    """A raw stream handle in the CUDA stream protocol (what Stream.from_external reads)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


def external_stream(cp, ptr):
    """A CuPy stream object for a stream CuPy did not make (never destroyed by it): through
    Stream.from_external where CuPy has it (14 and later, which deprecates ExternalStream)."""
    from_external = getattr(getattr(cp.cuda, "Stream", None), "from_external", None)
    if from_external is not None:
        return from_external(_Handle(int(ptr)))
    return cp.cuda.ExternalStream(int(ptr))
