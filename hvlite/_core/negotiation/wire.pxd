# The negotiation wire format, both directions; negotiation/wire.pyx is the only code that writes or parses it.
from libc.stdint cimport int64_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from hvlite._core.request cimport Meta

# A read cursor over one message; reads past the end yield 0 / "" (a short message never crashes).
cdef struct Reader:
    const char* p
    size_t n
    size_t off              # never past n
    bint bad                # a read went past the end or met an impossible value: stop there

# A view of one rank's submission inside the gathered buffer (no copy).
cdef struct Span:
    const char* p
    size_t n

# Record kinds a rank sends to rank 0.
cdef enum:
    REC_SUBMIT = 0
    REC_PROBE = 1      # stall report only: "I am waiting on this name, for this long"

# Response statuses rank 0 broadcasts.
cdef enum:
    RESP_OK = 0
    RESP_ERROR = 1

# Worker -> rank 0: header [stopping, joined], then records [kind, name, meta, age in us].
cdef cppclass Submission:
    bint stopping
    bint joined

cdef cppclass Record:
    int64_t kind
    string name
    Meta meta
    int64_t age_us

# Rank 0 -> workers: [stopping ranks], [fatal, message], [joined after, joined now], count, then
# count answers [name, status, slot, meta, message, value, late ranks], then the autotune tail.
cdef enum:
    FATAL_STALL = 1
    FATAL_MALFORMED = 2      # a rank's submission could not be read (the message names it)

cdef cppclass Head:
    vector[int64_t] stopping
    int64_t fatal               # 0, FATAL_STALL or FATAL_MALFORMED: every rank stops
    string fatal_msg
    int64_t joined_after        # ranks still joined once this round's join completed
    int64_t joined_now          # ranks contributing nothing to this round's work
    int64_t count

cdef cppclass Answer:
    string name
    int64_t status
    int64_t slot                # response-cache slot every rank stores it in, or -1
    Meta meta
    string message              # the error, for RESP_ERROR
    int64_t value               # join: the last rank to join, else -1
    string late                 # ranks that submitted last, "1,3"

cdef cppclass Tune:
    bint publish
    int64_t threshold
    int64_t cycle_ns

cdef void put_i64(string& s, int64_t v) noexcept nogil
cdef void put_str(string& s, const string& v) noexcept nogil
cdef void put_meta(string& s, const Meta& m) noexcept nogil
cdef int64_t get_i64(Reader* r) noexcept nogil
cdef string get_str(Reader* r) noexcept nogil
cdef void get_meta(Reader* r, Meta* m) noexcept nogil
cdef void reader_init(Reader* r, const char* p, size_t n) noexcept nogil
cdef bint reader_more(Reader* r) noexcept nogil

cdef void put_submission(string& s, bint stopping, bint joined) noexcept nogil
cdef void put_record(string& s, int64_t kind, const string& name, const Meta& m, int64_t age_us) noexcept nogil
cdef void get_submission(Reader* r, Submission* sub) noexcept nogil
cdef void get_record(Reader* r, Record* rec) noexcept nogil

cdef void put_answer(string& body, const Answer& a) noexcept nogil
# The response: head, then `body` (count answers, already encoded), then the autotune tail.
cdef void put_response(string& out, const Head& h, const string& body) noexcept nogil
cdef void put_tune(string& out, const Tune& t) noexcept nogil
cdef void get_head(Reader* r, Head* h) noexcept nogil
cdef void get_answer(Reader* r, Answer* a) noexcept nogil
cdef void get_tune(Reader* r, Tune* t) noexcept nogil

cdef extern from *:
    # the index of a nonzero word's lowest set bit (the bit vector's slots, in order)
    int lowest_bit "__builtin_ctzll"(unsigned long long) nogil

# The per-round all-reduce (BAND) vector: [ready bits | still-valid bits | flags], W words each.
cdef enum:
    FLAG_NO_MISSES = 1
    FLAG_NOT_STOPPING = 2
    FLAG_NO_STALL = 4
    FLAG_ALL_JOINED = 8
    FLAG_NO_TUNE = 16        # rank 0 clears it to publish a new autotune setting
    FLAG_NOT_JOINED = 32     # cleared by a joined rank: its riding data are not real (negotiation/agree.pyx)
    FLAG_CARRIED = 64        # one node, an express round: this rank's part of the collective's first
                             # copy-in is in its slot beside the vote (shm_preload; agreed: all did)
    SLOW_FLAGS = 1 | 2 | 4 | 16

cdef inline void bits_reset(vector[uint64_t]& b, int W) noexcept nogil:
    """Nothing ready, every slot still valid, no flags."""
    cdef int s
    b.assign(2 * W + 1, 0)
    for s in range(W, 2 * W):
        b[s] = ~(<uint64_t>0)

cdef inline void bits_mark_ready(vector[uint64_t]& b, int slot) noexcept nogil:
    b[slot // 64] |= (<uint64_t>1) << (slot % 64)

cdef inline void bits_mark_stale(vector[uint64_t]& b, int W, int slot) noexcept nogil:
    b[W + slot // 64] &= ~((<uint64_t>1) << (slot % 64))

cdef inline bint bits_ready(vector[uint64_t]& b, int slot) noexcept nogil:
    return (b[slot // 64] >> (slot % 64)) & 1

cdef inline bint bits_valid(vector[uint64_t]& b, int W, int slot) noexcept nogil:
    return (b[W + slot // 64] >> (slot % 64)) & 1

cdef inline void bits_all_ready(vector[uint64_t]& b, int W) noexcept nogil:
    """A joined rank is ready for everything: it never holds a slot back."""
    cdef int s
    for s in range(W):
        b[s] = ~(<uint64_t>0)

cdef inline void bits_set_flags(vector[uint64_t]& b, int W, uint64_t flags) noexcept nogil:
    b[2 * W] = flags

cdef inline uint64_t bits_flags(vector[uint64_t]& b, int W) noexcept nogil:
    return b[2 * W]

cdef inline uint64_t bits_tag(vector[uint64_t]& b, int W) noexcept nogil:
    """One word that stands for a vote of at most one ready slot, no slot stale and flags
    under 2^31 (a steady loop's: equal tags, equal votes), else 0 (shm_and_words then reads
    the words)."""
    cdef int w
    cdef uint64_t slot = 0, word
    if b[2 * W] >> 31:
        return 0
    for w in range(W):
        word = b[w]
        if word:
            if slot or (word & (word - 1)):
                return 0
            slot = <uint64_t>(w * 64 + lowest_bit(word)) + 1
        if b[W + w] != ~(<uint64_t>0):
            return 0
    return (<uint64_t>1 << 63) | (b[2 * W] << 32) | slot
