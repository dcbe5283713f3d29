"""The negotiation wire format, both directions, and nothing else: every rank's submission to
rank 0 and rank 0's response to all. Fields are native int64s (every rank runs the same build);
strings are a length then bytes. Keeping writer and reader side by side is what keeps them in step.

The def functions at the end expose the same encoders and decoders to Python, for tests.
"""
# distutils: language = c++
from libc.string cimport memcpy
from libc.stdint cimport int64_t, uint64_t
from libc.limits cimport INT_MIN, INT_MAX
from hvlite._core.codes cimport C_COUNT, DT_COUNT, OP_COUNT, ALG_COUNT
from libcpp.string cimport string
from libcpp.vector cimport vector
from hvlite._core.request cimport Meta


cdef void put_i64(string& s, int64_t v) noexcept nogil:
    s.append(<const char*>&v, 8)


cdef void put_str(string& s, const string& v) noexcept nogil:
    put_i64(s, <int64_t>v.size())
    s.append(v)


cdef void put_meta(string& s, const Meta& m) noexcept nogil:
    cdef size_t i
    put_i64(s, m.collective)
    put_i64(s, m.dtype)
    put_i64(s, m.op)
    put_i64(s, m.root)
    put_i64(s, m.algorithm)
    put_i64(s, <int64_t>m.shape.size())
    for i in range(m.shape.size()):
        put_i64(s, m.shape[i])
    put_str(s, m.error)
    put_i64(s, m.apart)


cdef void reader_init(Reader* r, const char* p, size_t n) noexcept nogil:
    r.p = p
    r.n = n
    r.off = 0
    r.bad = False


cdef bint reader_more(Reader* r) noexcept nogil:
    return not r.bad and r.off < r.n


cdef int64_t get_i64(Reader* r) noexcept nogil:
    cdef int64_t v = 0
    if r.bad or r.n - r.off < 8:        # off <= n always: no wrap
        r.bad = True
        return 0
    memcpy(&v, r.p + r.off, 8)
    r.off += 8
    return v


cdef string get_str(Reader* r) noexcept nogil:
    cdef int64_t n = get_i64(r)
    cdef string s
    if r.bad or n < 0 or <uint64_t>n > r.n - r.off:
        r.bad = True
        return s
    s.assign(r.p + r.off, <size_t>n)
    r.off += <size_t>n
    return s


cdef int _get_int(Reader* r) noexcept nogil:
    """An int field: a value past int's range is malformed, not cut to its low bits (256 would
    pass as code 0)."""
    cdef int64_t v = get_i64(r)
    if v < INT_MIN or v > INT_MAX:
        r.bad = True
        return 0
    return <int>v


cdef void get_meta(Reader* r, Meta* m) noexcept nogil:
    cdef int64_t i, nd
    m.collective = _get_int(r)
    m.dtype = _get_int(r)
    m.op = _get_int(r)
    m.root = _get_int(r)
    m.algorithm = _get_int(r)
    nd = get_i64(r)
    m.shape.clear()
    if nd < 0 or <uint64_t>nd > (r.n - r.off) // 8:      # a corrupt count allocates nothing
        r.bad = True
        return
    for i in range(nd):
        m.shape.push_back(get_i64(r))
        if m.shape.back() < 0:
            r.bad = True
    m.error = get_str(r)
    m.apart = 1 if get_i64(r) != 0 else 0
    # codes index the tables; a poisoned request (error set) carries whatever its rank could
    # tell (dtype -1: none hvlite knows) and is never run
    if m.error.empty() and not (0 <= m.collective < C_COUNT and 0 <= m.dtype < DT_COUNT
                                and 0 <= m.op < OP_COUNT and 0 <= m.algorithm < ALG_COUNT):
        r.bad = True


# ---- worker -> rank 0 ------------------------------------------------------------------------

cdef void put_submission(string& s, bint stopping, bint joined) noexcept nogil:
    put_i64(s, 1 if stopping else 0)
    put_i64(s, 1 if joined else 0)


cdef void put_record(string& s, int64_t kind, const string& name, const Meta& m, int64_t age_us) noexcept nogil:
    put_i64(s, kind)
    put_str(s, name)
    put_meta(s, m)
    put_i64(s, age_us)


cdef void get_submission(Reader* r, Submission* sub) noexcept nogil:
    sub.stopping = get_i64(r) != 0
    sub.joined = get_i64(r) != 0


cdef void get_record(Reader* r, Record* rec) noexcept nogil:
    rec.kind = get_i64(r)
    rec.name = get_str(r)
    get_meta(r, &rec.meta)
    rec.age_us = get_i64(r)


# ---- rank 0 -> workers -----------------------------------------------------------------------

cdef void put_answer(string& body, const Answer& a) noexcept nogil:
    put_str(body, a.name)
    put_i64(body, a.status)
    put_i64(body, a.slot)
    put_meta(body, a.meta)
    put_str(body, a.message)
    put_i64(body, a.value)
    put_str(body, a.late)


cdef void put_response(string& out, const Head& h, const string& body) noexcept nogil:
    cdef size_t i
    out.reserve(out.size() + 64 + 8 * h.stopping.size() + h.fatal_msg.size() + body.size())
    put_i64(out, <int64_t>h.stopping.size())
    for i in range(h.stopping.size()):
        put_i64(out, h.stopping[i])
    put_i64(out, h.fatal)
    put_str(out, h.fatal_msg)
    put_i64(out, h.joined_after)
    put_i64(out, h.joined_now)
    put_i64(out, h.count)
    out.append(body)


cdef void put_tune(string& out, const Tune& t) noexcept nogil:
    """The autotune tail: its length, then [0] or [1, threshold, cycle ns]."""
    put_i64(out, 24 if t.publish else 8)
    if t.publish:
        put_i64(out, 1)
        put_i64(out, t.threshold)
        put_i64(out, t.cycle_ns)
    else:
        put_i64(out, 0)


cdef void get_head(Reader* r, Head* h) noexcept nogil:
    cdef int64_t i, nstop = get_i64(r)
    h.stopping.clear()
    if nstop < 0 or <uint64_t>nstop > (r.n - r.off) // 8:
        r.bad = True
        return
    for i in range(nstop):
        h.stopping.push_back(get_i64(r))
    h.fatal = get_i64(r)
    if not 0 <= h.fatal <= FATAL_MALFORMED:
        r.bad = True
    h.fatal_msg = get_str(r)
    h.joined_after = get_i64(r)
    h.joined_now = get_i64(r)
    h.count = get_i64(r)
    if h.count < 0:
        r.bad = True


cdef void get_answer(Reader* r, Answer* a) noexcept nogil:
    a.name = get_str(r)
    a.status = get_i64(r)
    a.slot = get_i64(r)
    get_meta(r, &a.meta)
    a.message = get_str(r)
    a.value = get_i64(r)
    a.late = get_str(r)


cdef void get_tune(Reader* r, Tune* t) noexcept nogil:
    cdef int64_t n = get_i64(r)
    if n < 0:
        r.bad = True
    t.publish = n > 0 and get_i64(r) == 1
    if t.publish:
        t.threshold = get_i64(r)
        t.cycle_ns = get_i64(r)
        if t.threshold < 0 or t.cycle_ns < 0:
            r.bad = True


# ---- Python access (tests) -------------------------------------------------------------------
# A meta is (collective, dtype, op, root, algorithm, shape, error, apart); names are str.

cdef string _bytes(s):
    return s if isinstance(s, bytes) else s.encode("utf-8", "surrogateescape")


cdef str _text(const string& s):
    return s.decode("utf-8", "surrogateescape")


cdef Meta meta_from(tuple m):
    cdef Meta meta
    meta.collective, meta.dtype, meta.op, meta.root, meta.algorithm = m[0], m[1], m[2], m[3], m[4]
    meta.shape = [int(d) for d in m[5]]
    meta.error = _bytes(m[6] if len(m) > 6 else "")
    meta.apart = bool(m[7]) if len(m) > 7 else 0
    return meta


cdef tuple meta_to(const Meta& m):
    return (m.collective, m.dtype, m.op, m.root, m.algorithm, tuple(m.shape), _text(m.error),
            m.apart)


def encode_submission(bint stopping, bint joined, records=()):
    """records: (kind, name, meta, age_us) tuples."""
    cdef string s
    put_submission(s, stopping, joined)
    for kind, name, meta, age_us in records:
        put_record(s, kind, _bytes(name), meta_from(tuple(meta)), age_us)
    return <bytes>s


cdef int _check_read(Reader* r, what) except -1:
    if r.bad:
        raise ValueError(f"malformed {what}: a field at byte {r.off} of {r.n} runs past the end "
                         "or holds an impossible value")
    return 0


def decode_submission(bytes data):
    """(stopping, joined, [(kind, name, meta, age_us)])."""
    cdef Reader r
    cdef Submission sub
    cdef Record rec
    reader_init(&r, data, len(data))
    get_submission(&r, &sub)
    records = []
    while reader_more(&r):
        get_record(&r, &rec)
        if r.bad:
            break
        records.append((rec.kind, _text(rec.name), meta_to(rec.meta), rec.age_us))
    _check_read(&r, "submission")
    return sub.stopping, sub.joined, records


def encode_response(stopping=(), fatal="", joined_after=0, joined_now=0, answers=(), tune=None):
    """answers: (name, status, slot, meta, message, value, late) tuples; tune: None or
    (threshold, cycle_ns). The encoding rank 0 broadcasts."""
    cdef Head h
    cdef Answer a
    cdef Tune t
    cdef string body, out
    h.stopping = list(stopping)
    h.fatal = FATAL_STALL if fatal else 0
    h.fatal_msg = _bytes(fatal)
    h.joined_after, h.joined_now = joined_after, joined_now
    h.count = 0
    for name, status, slot, meta, message, value, late in answers:
        a.name, a.status, a.slot = _bytes(name), status, slot
        a.meta = meta_from(tuple(meta))
        a.message, a.value, a.late = _bytes(message), value, _bytes(late)
        put_answer(body, a)
        h.count += 1
    put_response(out, h, body)
    t.publish = tune is not None
    if tune is not None:
        t.threshold, t.cycle_ns = tune
    put_tune(out, t)
    return <bytes>out


def decode_response(bytes data, bint with_tune=True):
    """The response as a dict; with_tune=False for rank 0's part alone (no autotune tail)."""
    cdef Reader r
    cdef Head h
    cdef Answer a
    cdef Tune t
    cdef int64_t i
    reader_init(&r, data, len(data))
    get_head(&r, &h)
    answers = []
    for i in range(h.count):
        get_answer(&r, &a)
        if r.bad:
            break
        answers.append((_text(a.name), a.status, a.slot, meta_to(a.meta), _text(a.message),
                        a.value, _text(a.late)))
    out = {"stopping": list(h.stopping), "fatal": _text(h.fatal_msg) if h.fatal else "",
           "joined_after": h.joined_after, "joined_now": h.joined_now, "answers": answers,
           "tune": None}
    if with_tune:
        get_tune(&r, &t)
        out["tune"] = (t.threshold, t.cycle_ns) if t.publish else None
    _check_read(&r, "response")
    out["rest"] = <Py_ssize_t>(r.n - r.off) if r.off <= r.n else -<Py_ssize_t>(r.off - r.n)
    return out


def vote_tag(ready=(), stale=(), uint64_t flags=0, int capacity=1024):
    """bits_tag of the round's vote with these cache slots ready and found stale, and these
    flags (tests)."""
    cdef int W = (capacity + 63) // 64
    cdef vector[uint64_t] b
    bits_reset(b, W)
    for s in ready:
        bits_mark_ready(b, s)
    for s in stale:
        bits_mark_stale(b, W, s)
    bits_set_flags(b, W, flags)
    return bits_tag(b, W)
