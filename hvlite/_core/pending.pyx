"""What the Python side holds while the coordinator works: a Pending per submitted request
(poll, wait without the GIL, results), OwnedBuffer for results the coordinator allocated, and
the handles users hold: Work, the one completion protocol of every handle hvlite returns
(torch.distributed's `Work`), with Handle and ArrayHandle, a request's.

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
Compiled, so that an async all-reduce's handle costs a C allocation and its synchronize one C
call (as Python classes they were a sixth of an async 4 KiB call then synchronize).

A Pending holds the arrays its request reads and writes (`keep`), and the coordinator holds every
Pending until its request completes: a caller that drops its handle never frees memory the
coordinator thread is still writing into."""
# distutils: language = c++
cimport cython
cimport numpy as cnp
from libc.stdlib cimport free
from cpython.exc cimport PyErr_CheckSignals
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.ref cimport Py_REFCNT
from hvlite._core.request cimport *
from hvlite._core.codes cimport *
from hvlite._core.submission cimport Submission
from hvlite._core.codes import exception as _exception


cdef class OwnedBuffer:
    """Bytes the coordinator malloc'd (allgather, alltoall results), freed with this object."""

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, self.ptr, self.size, 0, flags)

    def __dealloc__(self):
        free(self.ptr)


cdef double WAIT_SLICE = 0.1    # seconds between looks at Python's signals while waiting


cdef class Rounds:
    """What a Pending's wait calls on its owner, as C calls (a Python method call each was a
    tenth of an async 4 KiB call then synchronize)."""

    cdef void drive_until(self, Request* req, double until) noexcept nogil:
        """Run rounds on this thread until req completes or the clock reaches `until`."""

    cdef int sweep_done(self) except -1:
        """Let go of what completed meanwhile (dropped handles)."""
        return 0

    cdef int let_go(self, Pending p) except -1:
        """Let go of `p`, whose request this thread's own wait completed (settled_here)."""
        return 0

    cdef object post(self, str name, Submission s, cnp.ndarray inp, cnp.ndarray out):
        """Queue an asynchronous request: its Pending, or (kind, message) when refused (the
        lean face's async calls, as C calls)."""
        raise NotImplementedError

    cdef void recycle(self, Request* req) noexcept:
        """(GIL) A completed request no Pending holds any more (its result already freed)."""
        del req


@cython.freelist(16)
cdef class Pending:
    """The Python side's hold on one submitted Request."""

    cdef bint pending(self) noexcept:
        return hv_load(&self.req.status) == ST_PENDING

    def release(self):
        """Drop the buffers early (the handle has taken its result)."""
        if not self.pending():
            self.keep = None

    def poll(self):
        return hv_load(&self.req.status) != ST_PENDING

    def wait(self):
        self.wait_c()

    cdef int wait_c(self) except -1:
        """Block until the request completes, running the coordinator's rounds on this thread
        meanwhile (as a synchronous call does): a thread that waits submits nothing more, so
        its rank's burst of submissions is over, and running the round here saves waking the
        coordinator thread and being woken back (an async 4 KiB call then synchronize: 35 us
        against 12 for the synchronous call). Whatever stops the driving (a stop, another
        thread's round) leaves this thread blocked without the GIL until the request completes."""
        cdef Request* req = self.req
        cdef hv_monitor* mon = self.mon
        cdef int i
        cdef double until
        cdef Rounds owner = self.owner
        cdef bint first = True
        if hv_load(&req.status) != ST_PENDING:
            return self.waited()
        while True:
            with nogil:
                # the first slice runs from the submit (no clock read: an async call's express
                # round completes it at once; a handle waited on long after ends it after a turn)
                until = req.submitted + WAIT_SLICE if first else hv_now() + WAIT_SLICE
                first = False
                owner.drive_until(req, until)
                for i in range(200):
                    if hv_load(&req.status) != ST_PENDING:
                        break
                    if i > 20:
                        hv_yield()
                if hv_load(&req.status) == ST_PENDING:
                    until = hv_now() + WAIT_SLICE
                    # counted before the status is read under the lock: an express round that
                    # completes the request without the lock (settled_here) sees the count
                    hv_add(&owner.sleepers, 1)
                    hv_lock(mon)
                    while hv_load_sc(&req.status) == ST_PENDING and hv_now() < until:
                        hv_wait(mon, WAIT_SLICE)
                    hv_unlock(mon)
                    hv_add(&owner.sleepers, -1)
            if hv_load(&req.status) != ST_PENDING:
                break
            # Python's signal handlers run here, every WAIT_SLICE at most, as in CPython's own
            # blocking calls: Ctrl-C raises KeyboardInterrupt in the caller; the request stays
            # the runtime's (completed, or failed at shutdown, like a dropped handle's)
            if PyErr_CheckSignals() < 0:
                return -1
        return self.waited()

    cdef int waited(self) except -1:
        """(its request completed) A wait's end: this Pending is let go when its own waiting
        thread settled it (settled_here: no sweep will), then whatever else completed
        meanwhile (dropped handles)."""
        if self.req.settled_here and self.req.held != NULL:
            self.owner.let_go(self)
        self.owner.sweep_done()
        return 0

    def settle(self):
        """wait(), then the status; the buffers are let go once it succeeded (an array
        handle's synchronize in one call)."""
        return self.settle_c()

    cdef int settle_c(self) except -1:
        cdef int status
        self.wait_c()
        status = hv_load(&self.req.status)
        if status == ST_DONE:
            self.keep = None
        return status

    @property
    def status(self):
        return hv_load(&self.req.status)

    @property
    def error_kind(self):
        return self.req.error_kind

    @property
    def error_code(self):
        return self.req.error_code

    @property
    def error(self):
        return self.req.error.decode("utf-8", "replace")

    @property
    def algorithm_used(self):
        return self.req.algorithm_used

    @property
    def value(self):
        return self.req.value

    @property
    def result_splits(self):
        return [self.req.result_splits[i] for i in range(self.req.result_splits.size())]

    @property
    def result_given(self):
        """The allgather / alltoall result was written into the output array passed in."""
        return self.req.result_given

    @property
    def result_total(self):
        """Rows of an allgather's or alltoall's result: the sum of result_splits (rows of zero
        bytes leave no other trace), without building the list."""
        cdef long long total = 0
        cdef size_t i
        for i in range(self.req.result_splits.size()):
            total += self.req.result_splits[i]
        return total

    def take_result(self):
        """The coordinator-allocated result as a buffer object (ownership moves to it)."""
        cdef OwnedBuffer b = OwnedBuffer.__new__(OwnedBuffer)
        b.ptr = self.req.result
        b.size = <Py_ssize_t>(self.req.result_rows)
        self.req.result = NULL
        return b

    @property
    def result_rows(self):
        return self.req.result_rows

    def __dealloc__(self):
        if self.req == NULL:
            return
        if not self.req.settled_here:       # (else the coordinator is done with it for good)
            hv_lock(self.mon)
            if hv_load(&self.req.status) == ST_PENDING:
                self.req.orphan = True          # the coordinator frees it when it completes
                hv_unlock(self.mon)
                return
            hv_unlock(self.mon)
        free(self.req.result)
        self.req.result = NULL
        if self.owner is not None:
            self.owner.recycle(self.req)
        else:
            del self.req


cdef Pending make_pending(Request* req, hv_monitor* mon, Rounds owner, object keep):
    cdef Pending p = Pending.__new__(Pending)
    p.req = req
    p.mon = mon
    p.owner = owner
    p.keep = keep
    return p


cdef class Ledger:
    """Every Pending of a set whose request may still be in flight. The coordinator notes each
    held request it completes (`completed`, under the completion monitor); the next sweep lets
    go of them, so dropped work costs O(completed), not O(in flight), per call. A request its
    own waiting thread completed in the express round (settled_here) is let go by that wait
    instead (Rounds.let_go), without the monitor."""

    cdef int track(self, Pending p) except -1:
        """Hold `p` (and so its buffers) until its request completes."""
        self.sweep()
        p.req.held = <void*>p
        self.live.add(p)
        return 0

    cdef int track_late(self, Pending p) except -1:
        """Hold `p`, whose request the coordinator can see already (run_now): the request is
        marked held under the completion monitor, so either the coordinator finds it held when
        it completes it (and the next sweep lets go of it), or it completed before and is not
        held at all."""
        cdef bint done
        self.sweep()
        hv_lock(self.mon)
        done = hv_load(&p.req.status) != ST_PENDING
        if not done:
            p.req.held = <void*>p
        hv_unlock(self.mon)
        if not done:
            self.live.add(p)
        return 0

    cdef int sweep(self) except -1:
        """Let go of the requests completed since the last sweep: a dropped handle's buffers
        are released at the first hvlite call on this rank after its request completes, the
        wait that saw it complete included. A completed request's Pending is alive until this
        (the set holds it), so its pointer is good."""
        cdef vector[Request*] done
        cdef size_t i
        if not hv_load(&self.has_completed):    # no lock: one who saw a status sees this too
            return 0
        hv_lock(self.mon)
        done.swap(self.completed)
        hv_store(&self.has_completed, 0)
        hv_unlock(self.mon)
        live = self.live
        for i in range(done.size()):
            if done[i].held != NULL:
                live.discard(<object>done[i].held)
        return 0

    cdef Pending dropped(self, const string& name, bint any_handle):
        """The pending request named `name` whose handle is gone (only this table holds it), or
        with `any_handle` whether its handle is held or not."""
        for q in self.live:
            # references: the set's and this loop's; a live handle would add its own
            if ((any_handle or Py_REFCNT(q) == 2) and (<Pending>q).pending()
                    and (<Pending>q).req.name == name):
                return <Pending>q
        return None

    def in_flight(self):
        """This rank's requests not yet completed (handles dropped or not), oldest first."""
        self.sweep()
        return sorted((q for q in self.live if (<Pending>q).pending()),
                      key=lambda q: (<Pending>q).req.submitted)

    def __len__(self):
        self.sweep()
        return len(self.live)

    def release_all(self):
        """After the coordinator has stopped (every request completed): let go of them all."""
        self.live = set()
        hv_lock(self.mon)
        self.completed.clear()
        hv_store(&self.has_completed, 0)
        hv_unlock(self.mon)


cdef Ledger make_ledger(hv_monitor* mon):
    cdef Ledger l = Ledger.__new__(Ledger)
    l.live = set()
    l.mon = mon
    return l


# ---- the handles ---------------------------------------------------------------------------

cdef class Work:
    """The protocol; subclasses supply _ready, _block, _collect and _release."""

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


cdef class Handle(Work):
    """An in-flight collective. `poll()` says whether it finished; `synchronize()` waits and
    returns its result (or raises what went wrong, on every rank involved). The runtime holds
    the buffers it reads and writes until it completes, so dropping a handle is safe."""

    def __init__(self, Pending pending, finish, name, str where=""):
        # (Work's fields start unsettled: a new object's are False and None)
        self._pending, self._finish, self.name = pending, finish, name
        self._where = where        # a process set's rank map, for messages that name ranks

    def _ready(self):
        return self._pending.poll()

    def _block(self):
        cdef Pending p = self._pending      # held here: another thread's synchronize may drop
        p.wait_c()                          # the handle's reference while this one waits

    cdef int _raise_failure(self) except -1:
        """Raise the request's error when it did not succeed."""
        cdef Pending p = self._pending
        if p.req.status != ST_DONE:
            raise _exception(p.req.error_kind, p.error + self._where, p.req.error_code)
        return 0

    def _collect(self):
        self._raise_failure()
        return self._finish(self._pending)

    def _release(self):
        self._pending.release()
        self._pending = None
        self._finish = None


@cython.final
cdef class ArrayHandle(Handle):
    """A Handle whose result is an array known when it was submitted (an all-reduce's output):
    `_finish` is that array."""

    def _collect(self):
        self._raise_failure()
        return self._finish

    def synchronize(self):
        """The protocol in one C call for a result that completed; an error goes the
        protocol's way."""
        cdef Pending p
        if not self._settled:
            p = self._pending       # held here: another thread's synchronize may drop the
            if p.settle_c() != ST_DONE:     # handle's reference while this one waits
                return Work.synchronize(self)
            self._value, self._settled = self._finish, True
            self._pending = None
            self._finish = None
        if self._error is not None:
            raise self._error
        return self._value


cdef ArrayHandle array_handle(Pending p, object out, str name):
    cdef ArrayHandle h = ArrayHandle.__new__(ArrayHandle)
    h._pending, h._finish, h.name, h._where = p, out, name, ""
    return h
