"""One completion protocol for every handle hvlite returns (torch.distributed's `Work`): `Work`
itself is compiled (hvlite/_core/pending.pyx, where the protocol is described); here are the handles
made of other handles.
"""
import threading

from hvlite._core.pending import Work  # noqa: F401  (the protocol, for every handle kind)


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


class Over(Work):
    """A handle over one other handle, `inner`, whose result it turns into its own in
    `_collect` (a subclass's): no list of parts and no function call, for the calls made once
    per gradient (hvlite.torch's in-place and out-of-place calls, a cast's way back)."""

    __slots__ = ("inner",)

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def _ready(self):
        return self.inner.poll()

    def _block(self):
        self.inner.wait()

    def _release(self):
        self.inner = None


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
