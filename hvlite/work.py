"""One completion protocol for every handle hvlite returns (torch.distributed's `Work`).

    h = hvd.allreduce_async(x)      # any collective, grouped call, device or torch handle
    h.poll()                        # finished? never blocks
    h.wait()                        # block until finished; never raises
    h.synchronize()                 # wait, then the result, or raise what went wrong
    h.result()                      # the same as synchronize()
    h.exception()                   # wait, then the error (None when it succeeded)
    h()                             # Horovod's sparse handles are called for the result

A handle settles once: the result or the error is kept, and every later call returns or raises
the same. Subclasses say only how to tell whether they are finished (`_ready`), how to block
(`_block`), how to read the outcome (`_collect`) and what to let go of afterwards (`_release`).
Dropping a handle is always safe: the runtime owns what the work reads and writes until it ends.
"""
import threading


class Work:
    __slots__ = ("_settled", "_value", "_error", "__weakref__")

    def __init__(self):
        self._settled = False
        self._value = self._error = None

    # ---- what a kind of handle supplies ----------------------------------------------------
    def _ready(self):
        raise NotImplementedError

    def _block(self):
        raise NotImplementedError

    def _collect(self):
        raise NotImplementedError

    def _release(self):
        pass

    # ---- the protocol ------------------------------------------------------------------------
    def poll(self):
        """True once the work has finished (successfully or not); never blocks."""
        return self._settled or bool(self._ready())

    def wait(self):
        """Block until the work has finished; errors are raised by synchronize(), not here."""
        if not self._settled:
            self._block()
        return True

    def _settle(self):
        self._block()
        try:
            self._value = self._collect()
        except Exception as e:         # kept, and raised again on every later call
            self._error = e
        self._settled = True
        self._release()

    def synchronize(self):
        """Wait, then return the result or raise the error (on every rank involved)."""
        if not self._settled:
            self._settle()
        if self._error is not None:
            raise self._error
        return self._value

    def result(self):
        return self.synchronize()

    def exception(self):
        """Wait, then return the error the work ended with, or None."""
        if not self._settled:
            self._settle()
        return self._error

    def __call__(self):
        return self.synchronize()


class Composite(Work):
    """Work made of other handles and a function of their results: a grouped call (the list of
    results), a chain (the first result starts the rest), a decompression, a tensor conversion.
    Every part is synchronized even when one fails, so none is left behind; the first error is
    raised."""

    __slots__ = ("parts", "finish")

    def __init__(self, parts, finish):
        super().__init__()
        self.parts, self.finish = list(parts), finish

    def _ready(self):
        return all(p.poll() for p in self.parts)

    def _block(self):
        for p in self.parts:
            p.wait()

    def _collect(self):
        errors = [p.exception() for p in self.parts]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return self.finish([p.synchronize() for p in self.parts])

    def _release(self):
        self.parts, self.finish = (), None


class GroupHandle(Composite):
    """Handles of one grouped call; synchronizes to the list of results."""

    __slots__ = ()

    def __init__(self, handles):
        super().__init__(handles, list)

    @property
    def handles(self):
        return self.parts


class ChainHandle(Work):
    """A collective made of two: `then(first's result)` runs the rest (e.g. a second collective
    sized by the first) and gives the result. It runs on a helper thread as soon as the first
    has finished, not when this handle is synchronized: had the second step waited for
    synchronize(), two chains synchronized in different orders on different ranks would each
    wait for a step the other rank never submits."""

    __slots__ = ("_thread", "_outcome")

    def __init__(self, first, then):
        super().__init__()
        self._outcome = None

        def run():
            try:
                self._outcome = (True, then(first.synchronize()))
            except BaseException as e:      # noqa: BLE001 - kept for synchronize()
                self._outcome = (False, e)
        self._thread = threading.Thread(target=run, daemon=True, name="hvlite-chain")
        self._thread.start()

    def _ready(self):
        return not self._thread.is_alive()

    def _block(self):
        self._thread.join()

    def _collect(self):
        ok, value = self._outcome
        if not ok:
            raise value
        return value

    def _release(self):
        self._thread = self._outcome = None


class Mapped(Composite):
    """One handle whose result goes through `finish` (e.g. an array into a torch tensor)."""

    __slots__ = ()

    def __init__(self, handle, finish):
        super().__init__([handle], lambda results: finish(results[0]))
