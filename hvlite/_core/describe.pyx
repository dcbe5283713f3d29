"""Text for error and stall reports, built without the GIL: the messages every rank raises must
read like Python's own (shapes as tuples), so they are formatted here once."""
# distutils: language = c++
from libc.stdio cimport snprintf
from hvlite._core.codes cimport hv_name


cdef void append_int(string& s, int64_t v) noexcept nogil:
    cdef char buf[32]
    cdef int k = snprintf(buf, 32, "%lld", <long long>v)
    s.append(buf, k)


cdef string int_to_str(int64_t v) noexcept nogil:
    cdef string s
    append_int(s, v)
    return s


cdef string describe_shape(const vector[int64_t]& shape) noexcept nogil:
    cdef string s = string(b"(")
    cdef size_t i
    for i in range(shape.size()):
        if i:
            s.append(b", ")
        append_int(s, shape[i])
    if shape.size() == 1:
        s.append(b",")
    s.append(b")")
    return s


cdef string code_name(const char* const* table, int n, int i, const char* fallback) noexcept nogil:
    return string(hv_name(table, n, i, fallback))
