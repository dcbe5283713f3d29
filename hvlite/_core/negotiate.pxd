from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from hvlite._core.request cimport Meta
from hvlite._core.cache cimport Cache

cdef struct Reader:
    const char* p
    size_t n
    size_t off

cdef void put_i64(string& s, int64_t v) noexcept nogil
cdef void put_str(string& s, const string& v) noexcept nogil
cdef void put_meta(string& s, const Meta& m) noexcept nogil
cdef int64_t get_i64(Reader* r) noexcept nogil
cdef string get_str(Reader* r) noexcept nogil
cdef void get_meta(Reader* r, Meta* m) noexcept nogil

# Rank 0's view of the names some ranks have submitted and others not yet.
cdef cppclass Entry:
    vector[Meta] metas
    vector[char] have
    int count
    vector[int64_t] arrival     # the round in which each rank's submission arrived
    double first_seen
    int64_t order

cdef cppclass Table:
    unordered_map[string, Entry] entries
    int64_t next_order
    vector[char] joined
    vector[int64_t] join_time
    int64_t join_clock

# Record kinds a rank sends to rank 0.
cdef enum:
    REC_SUBMIT = 0
    REC_PROBE = 1      # stall report only: "I am waiting on this name, for this long"

# Response statuses rank 0 broadcasts.
cdef enum:
    RESP_OK = 0
    RESP_ERROR = 1

cdef void table_init(Table* t, int n) noexcept nogil
# Rank 0: fold every rank's records into the table and produce the response stream.
cdef string rank0_respond(Table* t, Cache* cache, vector[string]& payloads, int n, double now,
                          double stall_check, double stall_shutdown, int64_t clock) noexcept nogil
cdef string describe_shape(const vector[int64_t]& shape) noexcept nogil
cdef string int_to_str(int64_t v) noexcept nogil
