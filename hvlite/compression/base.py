"""The Compressor interface and what every method shares: argument checks, error feedback
state keyed by tensor name on each process set, the handle that decompresses on synchronize,
byte accounting.

A method turns a gradient into a payload (the arrays that go on the wire) and a context (what
only this rank needs to decode it):

    payload, ctx = c.compress(grad, name)
    approx = c.decompress(payload, ctx)
    h = c.allreduce_async(grad, op=Average, name=name); reduced = h.synchronize()

`allreduce_async` is where a method picks its collective: dense payloads are all-reduced,
sparse and packed ones are all-gathered and summed on every rank in rank order (so every rank
ends with the same bits).
"""
import threading
import time
import zlib

import numpy as np

from hvlite import collectives, runtime, submit as host
from hvlite.errors import DtypeError, InvalidArgumentError, MismatchError
from hvlite.ops import Average, Sum, as_op
from hvlite.process_sets import global_process_set, state_of
from hvlite.compression import accounting as _stats
from hvlite.work import Composite


# Handles in flight and the function that turns their results into the reduced array.
Then = Composite


class Undone(Composite):
    """A stateful method's handle. When the exchange fails, the tensor's state goes back to what
    it was before the call. A rank that failed before sending never changed its state, so the
    ranks' states stay in step: random-k's step seed draws the same indices everywhere after
    the failure, and no residual loses what was never reduced."""

    __slots__ = ("undo",)

    def __init__(self, handle, undo):
        super().__init__([handle], _first)
        self.undo = undo

    def _collect(self):
        try:
            return super()._collect()
        except Exception:
            self.undo()
            raise

    def _release(self):
        super()._release()
        self.undo = None


def _first(results):
    return results[0]


def check_ratio(ratio, method):
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.floating, np.integer)) \
            or not 0.0 < float(ratio) <= 1.0:
        raise InvalidArgumentError(f"{method}: ratio must be a number in (0, 1], got {ratio!r}")
    return float(ratio)


def seed_of(*parts):
    """A seed every process derives alike (Python's hash() of a str differs per process)."""
    return zlib.crc32("\0".join(map(str, parts)).encode())


def wire_bytes(kind, payload_bytes, n):
    """Bytes one rank sends for a payload of this size under the bandwidth-optimal algorithm:
    all-reduce (ring) 2(n-1)/n of it, all-gather (n-1) times it."""
    if n <= 1:
        return 0
    return 2 * (n - 1) * payload_bytes // n if kind == "allreduce" else (n - 1) * payload_bytes


class Compressor:
    """Base of every method. Subclasses set `method`, implement compress/decompress and
    `_reduce(x, name, op, n)` (the collective part, returning a handle)."""

    method = "none"
    stateful = False              # keeps per-tensor state (needs a stable name per tensor)
    lossy = True                  # refuses integer tensors and ops other than Sum/Average
    first_kind = collectives.ALLREDUCE   # the collective a method starts with, under `name`

    state_maps = 1                # per-tensor state dicts a set's state has (sign: 2)

    def __init__(self, **options):
        self.options = options
        # Per-tensor state (residual, Q, step count) of each process set: one tensor name on two
        # sets is two tensors. The global set's under None, another's under its ProcessSet.
        self._sets = {}
        self._scope = threading.local()     # the set the current call on this thread runs on

    def _maps(self, process_set=None):
        """The set's state dicts (tensor name -> state), made at first use."""
        key = None if process_set is None or process_set is global_process_set else process_set
        maps = self._sets.get(key)
        if maps is None:
            maps = self._sets.setdefault(key, tuple({} for _ in range(self.state_maps)))
        return maps

    @property
    def state(self):
        """Tensor name -> this method's state, on the set the current call runs on (outside a
        call: the global set's)."""
        return self._state_maps()[0]

    def __call__(self, **options):
        """A fresh compressor of this kind with these options (and its own state)."""
        return type(self)(**{**self.options, **options})

    def __repr__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"Compression.{self.method}({opts})"

    # -- to implement
    def compress(self, x, name):
        raise NotImplementedError

    def decompress(self, payload, ctx):
        raise NotImplementedError

    def _reduce(self, x, name, op, n, ps=global_process_set):
        """Start the exchange of x's payload among the n ranks of process set `ps`."""
        raise NotImplementedError

    def _reduce_into(self, x, name, op, n, out, ps=global_process_set):
        """_reduce, its result written into `out` (x's shape and dtype, possibly x itself: a
        method reads x before its handle completes). A method that can write its last pass
        there directly overrides this; the others copy."""
        def into(res):
            np.copyto(out, res[0])
            return out
        return Then([self._reduce(x, name, op, n, ps)], into)

    # -- shared
    def check(self, x, name, op=Sum):
        """Raise the reason this tensor cannot go through this method, if there is one."""
        if not self.lossy:
            return
        if x.dtype.kind != "f" and x.dtype.name != "bfloat16":     # kind: issubdtype is slow
            raise DtypeError(f"compression {self.method} of {name!r}: needs a floating-point "
                             f"tensor, got {x.dtype} (integer gradients cannot be compressed "
                             "lossily; use Compression.none)")
        if as_op(op) not in (Sum, Average):
            raise InvalidArgumentError(f"compression {self.method} of {name!r}: only Sum and "
                                       f"Average can be compressed, got {as_op(op).name}")
        if self.stateful and not name:
            raise InvalidArgumentError(f"compression {self.method}: keeps error-feedback state "
                                       "per tensor, so every call needs a stable name=")

    def allreduce_async(self, x, op=Average, name=None, out=None, process_set=None):
        """Start a compressed reduction of `x`; the handle's synchronize() returns the reduced
        dense array of x's shape and dtype (the same bits on every rank). `out`: a writable
        array of x's shape and dtype that takes the result instead of a new one (x itself for
        an in-place call): the cast methods write their last pass straight into it.
        `process_set`: the ranks that reduce (Horovod's process_set=; the global set by default)."""
        rt = runtime.current()
        ps = global_process_set if process_set is None else process_set
        st = state_of(rt, ps, f"compression {self.method}")
        src = x
        x = np.ascontiguousarray(x)
        if x.ndim != np.ndim(src):          # ascontiguousarray makes a 0-d array 1-d
            x = x.reshape(np.shape(src))
        label = name or st.auto_name(f"compressed_{self.method}")
        try:
            self.check(x, name, op)
            if out is not None:
                check_out(out, x, label, self.method)
        except (DtypeError, InvalidArgumentError) as e:
            poison(st, label, x, e, self.first_kind)
            raise
        t0 = time.perf_counter()
        outer = getattr(self._scope, "set", None)
        self._scope.set = ps        # the state the method reads and writes now is the set's
        try:
            saved = self._save(label) if self.stateful else None
            try:
                if out is None:
                    h = self._reduce(x, label, as_op(op), st.size, ps)
                else:
                    h = self._reduce_into(x, label, as_op(op), st.size, out, ps)
            except BaseException:
                if self.stateful:
                    self._restore(saved)
                raise
        finally:
            self._scope.set = outer
        _stats.span(rt, self.method, label, t0)
        return Undone(h, lambda: self._restore(saved)) if self.stateful else h

    # -- error-feedback state, kept in step across ranks
    def _state_maps(self):
        """The dicts that hold per-tensor state (name -> state) on the current call's set."""
        return self._maps(getattr(self._scope, "set", None))

    def _save(self, name):
        """`name`'s state as it is now. The methods replace arrays instead of writing into
        them, and a state dict is copied, so a shallow copy is enough."""
        return [(m, name, dict(m[name]) if isinstance(m.get(name), dict) else m.get(name),
                 name in m) for m in self._state_maps()]

    def _restore(self, saved):
        for m, name, value, present in saved:
            if present:
                m[name] = value
            else:
                m.pop(name, None)

    def account(self, name, dense, payload_bytes, kind, n):
        _stats.record(self.method, name, dense, payload_bytes, wire_bytes(kind, payload_bytes, n),
                      wire_bytes("allreduce", dense, n))


def check_out(out, x, name, method):
    """Raise why `out` cannot take the result of reducing x."""
    if not isinstance(out, np.ndarray):
        raise InvalidArgumentError(f"compression {method} of {name!r}: in-place reduction needs "
                                   f"a NumPy array, got {type(out).__name__}")
    if not out.flags.writeable:
        raise InvalidArgumentError(f"compression {method} of {name!r}: the array to reduce in "
                                   "place is read-only")
    if out.shape != x.shape or out.dtype != x.dtype:
        raise InvalidArgumentError(f"compression {method} of {name!r}: the output is "
                                   f"{out.dtype}{list(out.shape)}, the tensor "
                                   f"{x.dtype}{list(x.shape)}")


def poison(st, name, x, err, kind):
    """Send a failed request under `name` so the other ranks' matching collective fails with
    this rank's reason instead of waiting for it."""
    def check(_):
        raise err
    try:
        host.submit(st, kind, name, x, check=check)
    except (DtypeError, InvalidArgumentError):
        pass


def gathered_chunks(blob, n, expect, name, method):
    """Split an all-gathered uint8 blob into n equal chunks of `expect` bytes; a rank whose
    tensor had another size makes every rank raise (they all see the same blob)."""
    if blob.size != n * expect:
        raise MismatchError(f"compression {method} of {name!r}: ranks sent payloads of "
                            f"different sizes ({blob.size} bytes in all, {expect} expected from "
                            "each): the tensor's shape differs across ranks")
    return blob.reshape(n, expect)


def header(numel):
    return np.array([numel], np.int64).view(np.uint8)


def check_headers(chunks, numel, name, method):
    counts = chunks[:, :8].copy().view(np.int64).ravel()
    if (counts != numel).any():
        raise MismatchError(f"compression {method} of {name!r}: element counts differ across "
                            f"ranks: {[int(c) for c in counts]}")
