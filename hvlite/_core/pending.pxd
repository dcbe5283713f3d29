from libcpp.string cimport string
from libcpp.vector cimport vector
cimport numpy as cnp
from hvlite._core.request cimport Request, hv_monitor
from hvlite._core.submission cimport Submission

cdef class OwnedBuffer:
    cdef char* ptr
    cdef Py_ssize_t size

# Who completes the requests: a waiting thread runs its rounds itself (the coordinator).
cdef class Rounds:
    cdef int sleepers          # threads in a Pending's wait on the completion monitor
    cdef void drive_until(self, Request* req, double until) noexcept nogil
    cdef int sweep_done(self) except -1
    cdef int let_go(self, Pending p) except -1
    cdef object post(self, str name, Submission s, cnp.ndarray inp, cnp.ndarray out)
    cdef void recycle(self, Request* req) noexcept

cdef class Pending:
    cdef Request* req
    cdef hv_monitor* mon       # the coordinator's completion monitor
    cdef Rounds owner          # the coordinator: keeps the monitor alive; wait() runs its rounds
    cdef object keep           # the buffers the request reads and writes, until it completes

    cdef bint pending(self) noexcept
    cdef int wait_c(self) except -1
    cdef int waited(self) except -1
    cdef int settle_c(self) except -1

cdef Pending make_pending(Request* req, hv_monitor* mon, Rounds owner, object keep)

# What the runtime holds for a set (the user-thread side, under the GIL): every Pending whose
# request may still be in flight, so a dropped handle's buffers stay alive until it completes.
cdef class Ledger:
    cdef set live
    cdef vector[Request*] completed     # held requests completed since the last sweep (under mon)
    cdef int has_completed              # completed is not empty (set before the status is)
    cdef hv_monitor* mon
    cdef int track(self, Pending p) except -1
    cdef int track_late(self, Pending p) except -1
    cdef int sweep(self) except -1
    cdef Pending dropped(self, const string& name, bint any_handle)

cdef Ledger make_ledger(hv_monitor* mon)

# The completion protocol (every handle hvlite returns derives from Work) and a request's handles.
cdef class Work:
    cdef public bint _settled
    cdef public object _value
    cdef public object _error
    cdef object __weakref__

cdef class Handle(Work):
    cdef public Pending _pending
    cdef public object _finish
    cdef public object name
    cdef public str _where
    cdef int _raise_failure(self) except -1

cdef class ArrayHandle(Handle):
    pass

# An async all-reduce's handle, its result `out` (the lean face's, without a Python call).
cdef ArrayHandle array_handle(Pending p, object out, str name)
