"""Result arrays of out-of-place collectives, reused by name once the caller has let go of them.

A training step that calls `hvd.allreduce(g, name=...)` for every gradient would otherwise get
fresh arrays every step, and the kernel's page faults on fresh memory cost a third of a 24 MB
step (docs/benchmarks.md). The pool keeps the last result of each name; the next call with the
same name, shape and dtype reuses it only when nothing outside the pool refers to it any more
(no variable, view, handle or pending request), so a result the caller still holds is never
overwritten. It also keeps the result before that one: in `y = allreduce(x, name=n)` in a
loop, y still holds the last result when the next call comes, but no longer the one before it.
Only names that come back are kept (a name's result is kept from its second call on: names
used once, such as one per step, never hold memory here), and only the caller's own names
(automatic names are recycled for other calls). Arrays under MIN_BYTES come from the heap
and are not kept: they page-fault nothing, and a peer writes a few lines of them through the
kernel as cheaply. From MIN_BYTES (16 KiB) a fused batch's outputs lie in the arena below, which
the peers write themselves (docs/benchmarks.md, "Small outputs in the arena"). The pool holds at
most MAX_BYTES, least recently used first out.
Allgather and alltoall take theirs by shape (take_shaped): the core writes the result there when
it has exactly that size (every rank sent as many rows), else allocates it as before. Only from
GATHERED_MIN_BYTES: their results are copied by this rank itself, so the arena buys them nothing,
and below it a new array costs less than the pool's call (a named 16 KiB allgather on 2 ranks:
2.0-2.3 us with it, 1.4-1.5 without; docs/benchmarks.md).
The arrays it keeps come from `allocate(nbytes)` when given (the node's shared output arena,
_core/shm/arena.pyx: the peers write results into them without the kernel), else from NumPy.
"""
import sys
from collections import OrderedDict

import numpy as np

MIN_BYTES = 16 << 10
GATHERED_MIN_BYTES = 256 << 10      # allgather and alltoall results (take_shaped)
MAX_BYTES = 1 << 30
MAX_NAMES = 4096        # names seen once, remembered to know when one comes back


def _free_like(a, shape, dtype):
    """Whether `a` is shaped and typed so, held by the caller's reference (the pool's own, just
    taken out of its table) and getrefcount's argument only: nobody else can see it."""
    return a.shape == shape and a.dtype == dtype and sys.getrefcount(a) == 3


class OutputPool:
    __slots__ = ("arrays", "older", "nbytes", "seen", "allocate")
    gathered_min = GATHERED_MIN_BYTES

    def __init__(self, allocate=None):
        self.arrays = OrderedDict()
        self.older = OrderedDict()      # each name's result before its last (see _take)
        self.nbytes = 0
        self.seen = OrderedDict()
        self.allocate = allocate

    def _new(self, shape, dtype, nbytes):
        block = self.allocate(nbytes) if self.allocate is not None else None
        if block is None:
            return np.empty(shape, dtype)
        return np.frombuffer(block, dtype, nbytes // dtype.itemsize).reshape(shape)

    def take(self, name, like, keep=True):
        """An uninitialized array shaped and typed like `like`, for the result of `name`
        (`keep`: False for a name that is not the caller's own)."""
        if like.nbytes < MIN_BYTES or not keep:
            return np.empty_like(like)
        return self._take(name, like.shape, like.dtype, like.nbytes)

    def take_shaped(self, name, shape, dtype, keep=True):
        """As take() for an array of `shape` and `dtype`; None below GATHERED_MIN_BYTES or for
        a name not kept (the core's own allocation is as cheap there)."""
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= d
        if nbytes < GATHERED_MIN_BYTES or not keep:
            return None
        return self._take(name, shape, dtype, nbytes)

    def _take(self, name, shape, dtype, nbytes):
        prev = self.arrays.pop(name, None)
        if prev is not None:
            self.nbytes -= prev.nbytes
            before = self.older.pop(name, None)
            if before is not None:
                self.nbytes -= before.nbytes
            if _free_like(prev, shape, dtype):
                out = prev
            elif before is not None and _free_like(before, shape, dtype):
                # `y = allreduce(x, name=n)` in a loop: y still holds the last result when the
                # next call comes, but no longer the one before it
                out, before = before, prev
            else:
                out, before = self._new(shape, dtype, nbytes), prev
            if before is not None and before.shape == shape and before.dtype == dtype:
                self.older[name] = before
                self.nbytes += before.nbytes
        elif name not in self.seen:         # perhaps never again: remember the name only
            self.seen[name] = None
            if len(self.seen) > MAX_NAMES:
                self.seen.popitem(last=False)
            return np.empty(shape, dtype)
        else:
            out = self._new(shape, dtype, nbytes)
        self.arrays[name] = out
        self.nbytes += out.nbytes
        while self.nbytes > MAX_BYTES and (self.older or len(self.arrays) > 1):
            _, old = (self.older if self.older else self.arrays).popitem(last=False)
            self.nbytes -= old.nbytes
        return out

    def clear(self):
        self.arrays.clear()
        self.older.clear()
        self.seen.clear()
        self.nbytes = 0
