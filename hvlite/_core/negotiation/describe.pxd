# Text for error and stall reports: integers, shapes, code names (no GIL, no allocation beyond the string).
from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector

cdef void append_int(string& s, int64_t v) noexcept nogil
cdef void append_name(string& s, const string& name) noexcept nogil   # escaped, long ones cut
cdef string int_to_str(int64_t v) noexcept nogil
cdef string describe_shape(const vector[int64_t]& shape) noexcept nogil   # Python's tuple repr
cdef string code_name(const char* const* table, int n, int i, const char* fallback) noexcept nogil
