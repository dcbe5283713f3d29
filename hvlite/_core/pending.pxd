from hvlite._core.request cimport Request, hv_monitor

cdef class OwnedBuffer:
    cdef char* ptr
    cdef Py_ssize_t size

# Runs the owner's rounds on the calling thread until `req` completes (a waiter then needs no
# hand-off to the coordinator thread and back); called with the GIL, releases it.
ctypedef void (*drive_fn)(object owner, Request* req)

cdef class Pending:
    cdef Request* req
    cdef hv_monitor* mon       # the coordinator's completion monitor
    cdef object owner          # keeps the coordinator (and so the monitor) alive
    cdef object keep           # the buffers the request reads and writes, until it completes
    cdef drive_fn drive        # NULL: wait for the coordinator thread

    cdef bint pending(self) noexcept

cdef Pending make_pending(Request* req, hv_monitor* mon, object owner, object keep,
                          drive_fn drive=*)
