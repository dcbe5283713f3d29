from libcpp.string cimport string
from libcpp.vector cimport vector
from hvlite._core.request cimport Request, hv_monitor

cdef class OwnedBuffer:
    cdef char* ptr
    cdef Py_ssize_t size

# Who completes the requests: a waiting thread runs its rounds itself (the coordinator).
cdef class Rounds:
    cdef void drive_for(self, Request* req, double seconds) noexcept nogil
    cdef int sweep_done(self) except -1

cdef class Pending:
    cdef Request* req
    cdef hv_monitor* mon       # the coordinator's completion monitor
    cdef Rounds owner          # the coordinator: keeps the monitor alive; wait() runs its rounds
    cdef object keep           # the buffers the request reads and writes, until it completes

    cdef bint pending(self) noexcept

cdef Pending make_pending(Request* req, hv_monitor* mon, Rounds owner, object keep)

# What the runtime holds for a set (the user-thread side, under the GIL): every Pending whose
# request may still be in flight, so a dropped handle's buffers stay alive until it completes.
cdef class Ledger:
    cdef set live
    cdef vector[Request*] completed     # held requests completed since the last sweep (under mon)
    cdef hv_monitor* mon
    cdef int track(self, Pending p) except -1
    cdef int track_late(self, Pending p) except -1
    cdef int sweep(self) except -1
    cdef Pending dropped(self, const string& name, bint any_handle)

cdef Ledger make_ledger(hv_monitor* mon)
