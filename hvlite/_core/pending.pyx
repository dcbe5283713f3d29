"""What the Python side holds while the coordinator works: a Pending per submitted request
(poll, wait without the GIL, results), and OwnedBuffer for results the coordinator allocated.

A Pending holds the arrays its request reads and writes (`keep`), and the coordinator holds every
Pending until its request completes: a caller that drops its handle never frees memory the
coordinator thread is still writing into."""
# distutils: language = c++
from libc.stdlib cimport free
from cpython.exc cimport PyErr_CheckSignals
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.ref cimport Py_REFCNT
from hvlite._core.request cimport *
from hvlite._core.codes cimport *


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

    cdef void drive_for(self, Request* req, double seconds) noexcept nogil:
        """Run rounds on this thread until req completes or `seconds` have passed."""

    cdef int sweep_done(self) except -1:
        """Let go of what completed meanwhile (dropped handles)."""
        return 0


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
        if hv_load(&req.status) != ST_PENDING:
            owner.sweep_done()
            return
        while True:
            with nogil:
                owner.drive_for(req, WAIT_SLICE)
                for i in range(200):
                    if hv_load(&req.status) != ST_PENDING:
                        break
                    if i > 20:
                        hv_yield()
                if hv_load(&req.status) == ST_PENDING:
                    until = hv_now() + WAIT_SLICE
                    hv_lock(mon)
                    while hv_load(&req.status) == ST_PENDING and hv_now() < until:
                        hv_wait(mon, WAIT_SLICE)
                    hv_unlock(mon)
            if hv_load(&req.status) != ST_PENDING:
                break
            # Python's signal handlers run here, every WAIT_SLICE at most, as in CPython's own
            # blocking calls: Ctrl-C raises KeyboardInterrupt in the caller; the request stays
            # the runtime's (completed, or failed at shutdown, like a dropped handle's)
            PyErr_CheckSignals()
        owner.sweep_done()          # what completed meanwhile (dropped handles) is let go now

    def settle(self):
        """wait(), then the status; the buffers are let go once it succeeded (an array
        handle's synchronize in one call)."""
        cdef int status
        self.wait()
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
        hv_lock(self.mon)
        if hv_load(&self.req.status) == ST_PENDING:
            self.req.orphan = True          # the coordinator frees it when it completes
            hv_unlock(self.mon)
            return
        hv_unlock(self.mon)
        free(self.req.result)
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
    go of them, so dropped work costs O(completed), not O(in flight), per call."""

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
        hv_lock(self.mon)
        if self.completed.empty():
            hv_unlock(self.mon)
            return 0
        done.swap(self.completed)
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
        hv_unlock(self.mon)


cdef Ledger make_ledger(hv_monitor* mon):
    cdef Ledger l = Ledger.__new__(Ledger)
    l.live = set()
    l.mon = mon
    return l
