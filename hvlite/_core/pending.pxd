from hvlite._core.request cimport Request, hv_monitor

cdef class OwnedBuffer:
    cdef char* ptr
    cdef Py_ssize_t size

cdef class Pending:
    cdef Request* req
    cdef hv_monitor* mon       # the coordinator's completion monitor
    cdef hv_monitor* qmon      # its queue monitor, and under it the count of threads waiting
    cdef int* waiting          # for a request (they end its cycle-time pause: no more is coming)
    cdef object owner          # keeps the coordinator (and so the monitor) alive
    cdef object keep           # the buffers the request reads and writes, until it completes

    cdef bint pending(self) noexcept

cdef Pending make_pending(Request* req, hv_monitor* mon, hv_monitor* qmon, int* waiting,
                          object owner, object keep)
