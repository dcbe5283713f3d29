"""Text for error and stall reports, built without the GIL: the messages every rank raises must
read like Python's own (shapes as tuples), so they are formatted here once."""
# distutils: language = c++
from libc.stdio cimport snprintf
from hvlite._core.codes cimport hv_name


cdef void append_int(string& s, int64_t v) noexcept nogil:
    cdef char buf[32]
    cdef int k = snprintf(buf, 32, "%lld", <long long>v)
    s.append(buf, k)


cdef size_t NAME_SHOWN = 200     # bytes of a tensor name a report shows before it cuts


cdef void append_name(string& s, const string& name) noexcept nogil:
    """A tensor name in a report: control bytes escaped (\\xNN: a NUL would cut the C string
    of a stall line, a newline would split it), and past NAME_SHOWN bytes cut, its length said
    (a 100 KB name would otherwise be printed at every stall check)."""
    cdef char buf[8]
    cdef size_t i, shown = name.size() if name.size() <= NAME_SHOWN else NAME_SHOWN - 40
    cdef unsigned char c
    for i in range(shown):
        c = <unsigned char>name[i]
        if c < 0x20 or c == 0x7f:
            snprintf(buf, 8, "\\x%02x", c)
            s.append(buf, 4)
        else:
            s.push_back(<char>c)
    if shown < name.size():
        s.append(b"...")
        s.append(b" (")
        append_int(s, <int64_t>name.size())
        s.append(b" bytes)")


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
