from hvlite._core.request cimport Request, hv_monitor

cdef class OwnedBuffer:
    cdef char* ptr
    cdef Py_ssize_t size

cdef class Pending:
    cdef Request* req
    cdef hv_monitor* mon       # the coordinator's completion monitor
    cdef object owner          # the coordinator: keeps the monitor alive; wait() runs its rounds
    cdef object keep           # the buffers the request reads and writes, until it completes

    cdef bint pending(self) noexcept

cdef Pending make_pending(Request* req, hv_monitor* mon, object owner, object keep)
