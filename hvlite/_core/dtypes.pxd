# Element types the core reduces: DT_* in codes.h.
from hvlite._core.codes cimport *

cdef size_t dtype_size(int dt) noexcept nogil
