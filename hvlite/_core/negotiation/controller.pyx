"""Rank 0's negotiation logic (Horovod's controller): fold every rank's submission into the
table, pick the names every rank has submitted (or whose missing ranks have joined) in the order
they were first submitted, check that the ranks agree on each, and answer for all ranks at once.

A pure function of its inputs -- the submissions' bytes, the table and cache, the round number
and the clock -- with no MPI calls, so it can be driven in-process (the Controller class).
"""
# distutils: language = c++
from cython.operator cimport dereference as deref, preincrement as inc
from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from hvlite._core.request cimport Meta
from hvlite._core.codes cimport *
from hvlite._core.negotiation.cache cimport Cache, cache_init, cacheable, cache_pick_slot, cache_put, cache_lookup
from hvlite._core.negotiation.wire cimport *
from hvlite._core.negotiation.table cimport Entry, first_meta
from hvlite._core.negotiation.stall cimport Probes, stall_init, stall_note, stall_report
from hvlite._core.negotiation.describe cimport append_int, append_name, describe_shape, code_name

cdef extern from "<algorithm>" namespace "std" nogil:
    void sort[Iter, Compare](Iter first, Iter last, Compare comp)


cdef void table_init(Table* t, int n) noexcept nogil:
    t.entries.clear()
    t.next_order = 0
    t.joined.assign(n, 0)
    t.join_time.assign(n, -1)
    t.join_clock = 0


# ---- 1. fold -----------------------------------------------------------------------------------

cdef void _fold_record(Table* t, Record* rec, int r, int n, double now, int64_t clock) noexcept nogil:
    """One rank's submission of one name: the first one opens the entry and fixes its order."""
    cdef Entry* e
    if rec.meta.collective == C_JOIN:
        t.joined[r] = 1
        t.join_time[r] = t.join_clock
        t.join_clock += 1
    e = &t.entries[rec.name]
    if e.have.size() == 0:
        e.have.assign(n, 0)
        e.arrival.assign(n, 0)
        e.metas.resize(n)
        e.count = 0
        e.first_seen = now
        e.order = t.next_order
        t.next_order += 1
    if not e.have[r]:
        e.have[r] = 1
        e.arrival[r] = clock
        e.metas[r] = rec.meta
        e.count += 1


cdef string _fold(Table* t, Probes* probes, const vector[Span]& payloads, double now, int64_t clock,
                  vector[int64_t]& stopping) noexcept nogil:
    """Every rank's submission into the table; "" or what makes the first unreadable one so."""
    cdef int r, n = <int>payloads.size()
    cdef Reader rd
    cdef Submission sub
    cdef Record rec
    cdef string why
    for r in range(n):
        reader_init(&rd, payloads[r].p, payloads[r].n)
        if rd.n == 0:
            continue
        get_submission(&rd, &sub)    # sub.joined is informational: the JOIN record itself counts
        if sub.stopping:
            stopping.push_back(r)
        while reader_more(&rd):
            get_record(&rd, &rec)
            if rec.kind == REC_PROBE:
                stall_note(probes, rec.name, r, n, <double>rec.age_us * 1e-6)
            elif not rd.bad:
                _fold_record(t, &rec, r, n, now, clock)
        if rd.bad:
            why = string(b"rank ")
            append_int(why, r)
            why.append(b" sent a malformed negotiation message (a field at byte ")
            append_int(why, <int64_t>rd.off)
            why.append(b" of ")
            append_int(why, <int64_t>rd.n)
            why.append(b" runs past its end or holds an impossible value); the job cannot agree "
                       b"on what to run")
            return why
    return string()


# ---- 2. ready ----------------------------------------------------------------------------------

cdef struct Ready:
    int64_t order
    const string* name


cdef bint _before(const Ready& a, const Ready& b) noexcept nogil:
    return a.order < b.order


cdef vector[Ready] _ready(Table* t, int n) noexcept nogil:
    """Names every rank has submitted (a joined rank counts, except for join itself), in
    first-submitted order: the order every rank executes them in. A collective that cannot run
    with joined ranks (_joined_conflict) is ready, to fail, as soon as one is missing from it:
    a joined rank submits nothing until join completes, and waiting for the other ranks too
    could wait for ever where their automatic names went out of step (a rank that joined
    while the others made an unnamed allgather counts one allgather fewer: Horovod's
    test_horovod_join_allgather hung at 3 ranks)."""
    cdef vector[Ready] ready
    cdef Ready item
    cdef Entry* e
    cdef bint ok, refused
    cdef int r, coll
    ti = t.entries.begin()
    while ti != t.entries.end():
        e = &deref(ti).second
        ok, refused = True, False
        coll = first_meta(e, n).collective
        for r in range(n):
            if not e.have[r]:
                if not t.joined[r] or coll == C_JOIN:
                    ok = False
                elif coll != C_ALLREDUCE and coll != C_BARRIER:
                    refused = True
        if ok or refused:
            item.order = e.order
            item.name = &deref(ti).first
            ready.push_back(item)
        inc(ti)
    sort(ready.begin(), ready.end(), _before)
    return ready


# ---- 3. agreement ------------------------------------------------------------------------------

cdef string _field(const Meta& m, int field) noexcept nogil:
    cdef vector[int64_t] tail
    cdef string s2
    if field == 0:
        return code_name(HV_COLLECTIVE_NAMES, C_COUNT, m.collective, b"?")
    if field == 1:
        return code_name(HV_DTYPE_NAMES, DT_COUNT, m.dtype, b"unsupported")
    if field == 2:
        return code_name(HV_OP_NAMES, OP_COUNT, m.op, b"invalid")
    if field == 3:
        append_int(s2, m.root)
        return s2
    if field == 4:
        return code_name(HV_ALGORITHM_NAMES, ALG_COUNT, m.algorithm, b"invalid")
    if field == 5:
        return describe_shape(m.shape)
    # 6: trailing dimensions (allgather, alltoall)
    if m.shape.size() > 0:
        tail.assign(m.shape.begin() + 1, m.shape.end())
    return describe_shape(tail)


cdef const char* FIELD_NAMES[7]
FIELD_NAMES[:] = [b"collective", b"dtype", b"op", b"root rank", b"algorithm", b"shape",
                  b"shape after the first dimension"]


cdef bint _compared(int f, int coll) noexcept nogil:
    """Whether field f must agree for this collective."""
    if f == 3:
        return coll == C_BROADCAST
    if f == 4:
        return coll == C_ALLREDUCE
    if f == 5:
        return not (coll == C_ALLGATHER or coll == C_ALLTOALL or coll == C_BARRIER or coll == C_JOIN)
    if f == 6:
        return coll == C_ALLGATHER or coll == C_ALLTOALL
    return True


cdef bint _disagreement(Entry* e, int n, int ref, int f, string& msg) noexcept nogil:
    """Appends "ranks disagree on <field>: rank 0: x, rank 1: y; " when they differ."""
    cdef string first = _field(e.metas[ref], f)
    cdef bint differ = False
    cdef int r
    for r in range(n):
        if e.have[r] and _field(e.metas[r], f) != first:
            differ = True
    if not differ:
        return False
    msg.append(b"ranks disagree on ")
    msg.append(FIELD_NAMES[f])
    msg.append(b": ")
    for r in range(n):
        if e.have[r]:
            msg.append(b"rank ")
            append_int(msg, r)
            msg.append(b": ")
            msg.append(_field(e.metas[r], f))
            msg.append(b", ")
    msg.resize(msg.size() - 2)
    msg.append(b"; ")
    return True


cdef string _agreement(const string& name, Entry* e, int n) noexcept nogil:
    """Empty when every submitting rank agrees; else a message naming each rank's value."""
    cdef string msg
    cdef int r, f, ref = -1, coll
    for r in range(n):
        if e.have[r] and not e.metas[r].error.empty():
            msg.append(b"rank ")
            append_int(msg, r)
            msg.append(b": ")
            msg.append(e.metas[r].error)
            msg.append(b"; ")
        if e.have[r] and ref < 0:
            ref = r
    coll = e.metas[ref].collective
    for f in range(7):
        if _compared(f, coll) and _disagreement(e, n, ref, f, msg) and f == 0:
            break       # other fields mean nothing across different collectives
    if msg.empty():
        return msg
    msg.resize(msg.size() - 2)
    cdef string head = code_name(HV_COLLECTIVE_NAMES, C_COUNT, coll, b"collective")
    head.append(b" '")
    append_name(head, name)
    head.append(b"' failed on every rank: ")
    head.append(msg)
    return head


cdef string _joined_conflict(Table* t, const string& name, Entry* e, const Meta& meta, int n) noexcept nogil:
    """Only allreduce (and barrier) can run with joined ranks, which contribute the op's identity:
    anything else waiting on a joined rank fails at once, naming it, as Horovod refuses allgather,
    broadcast, alltoall and reducescatter after a join (rather than running or waiting)."""
    cdef string line, ranks
    cdef int r, k = 0
    for r in range(n):
        if t.joined[r] and not e.have[r]:
            if k:
                ranks.append(b", ")
            append_int(ranks, r)
            k += 1
    if k == 0:
        return line
    line = code_name(HV_COLLECTIVE_NAMES, C_COUNT, meta.collective, b"?")
    line.append(b" '")
    append_name(line, name)
    line.append(b"' cannot run while some ranks have joined (")
    line.append(b"ranks " if k > 1 else b"rank ")
    line.append(ranks)
    line.append(b" joined); only allreduce and barrier run with joined ranks")
    return line


# ---- 4. answer ---------------------------------------------------------------------------------

cdef string _late(Entry* e, int n) noexcept nogil:
    """Ranks whose submission arrived in the last round, when not all arrived together."""
    cdef int64_t lo = -1, hi = -1
    cdef int r
    cdef string s
    for r in range(n):
        if e.have[r]:
            if lo < 0 or e.arrival[r] < lo:
                lo = e.arrival[r]
            if e.arrival[r] > hi:
                hi = e.arrival[r]
    if hi == lo:
        return s
    for r in range(n):
        if e.have[r] and e.arrival[r] == hi:
            if not s.empty():
                s.append(b",")
            append_int(s, r)
    return s


cdef int64_t _last_joined(Table* t, int n) noexcept nogil:
    """Join completes: the last rank to join, and every rank is active again."""
    cdef int r, last = -1
    for r in range(n):
        if last < 0 or t.join_time[r] > t.join_time[last]:
            last = r
    t.joined.assign(n, 0)
    t.join_time.assign(n, -1)
    return last


cdef void _answer(Table* t, Cache* cache, const string& name, int n, int joined_now, int64_t clock,
                  string& body) noexcept nogil:
    """Check one ready name, encode its answer, give it a cache slot, drop it from the table."""
    cdef Answer a
    cdef Entry* e = &t.entries[name]
    cdef int r
    a.name = name
    a.meta = first_meta(e, n)
    a.meta.apart = 0
    for r in range(n):
        if e.have[r] and e.metas[r].apart:
            a.meta.apart = 1
    a.message = _agreement(name, e, n)
    if (a.message.empty() and joined_now and a.meta.collective != C_JOIN and
            a.meta.collective != C_BARRIER and a.meta.collective != C_ALLREDUCE):
        a.message = _joined_conflict(t, name, e, a.meta, n)
    a.status = RESP_ERROR if not a.message.empty() else RESP_OK
    a.slot = -1
    if a.message.empty() and cache.capacity > 0 and cacheable(a.meta.collective):
        a.slot = cache_pick_slot(cache)
        cache.last_used[a.slot] = clock
    a.value = -1
    if a.meta.collective == C_JOIN and a.message.empty():
        a.value = _last_joined(t, n)
    a.late = _late(e, n)
    put_answer(body, a)
    if a.slot >= 0:
        cache_put(cache, <int>a.slot, name, a.meta)
    t.entries.erase(name)


cdef int _count_joined(Table* t, int n) noexcept nogil:
    cdef int r, k = 0
    for r in range(n):
        k += t.joined[r]
    return k


cdef string controller_respond(Table* t, Cache* cache, const vector[Span]& payloads, double now,
                               int64_t clock, const Stall* stall) noexcept nogil:
    cdef int n = <int>payloads.size(), joined_now
    cdef Head h
    cdef Probes probes
    cdef string body, out, name
    cdef vector[Ready] ready
    cdef string malformed = _fold(t, &probes, payloads, now, clock, h.stopping)
    joined_now = _count_joined(t, n)
    ready = _ready(t, n)
    h.count = 0
    for item in ready:
        name = item.name[0]
        _answer(t, cache, name, n, joined_now, clock, body)
        h.count += 1
    h.fatal_msg = stall_report(stall, t, &probes, n, now)
    h.fatal = FATAL_STALL if not h.fatal_msg.empty() else 0
    if not malformed.empty():
        h.fatal_msg, h.fatal = malformed, FATAL_MALFORMED
    h.joined_after = _count_joined(t, n)
    h.joined_now = joined_now        # ranks contributing nothing to this round's work
    put_response(out, h, body)
    return out


# ---- Python access (tests) ---------------------------------------------------------------------

cdef class Controller:
    """Rank 0's logic for n simulated ranks: respond() takes each rank's submission bytes (from
    wire.encode_submission; b"" for a rank that sent nothing) and returns the response bytes
    (wire.decode_response(..., with_tune=False) reads them)."""
    cdef Table table
    cdef Cache cache
    cdef Stall stall
    cdef readonly int n
    cdef readonly int64_t clock

    def __init__(self, int n, int cache_capacity=0, double stall_check=0, double stall_shutdown=0):
        self.n = n
        table_init(&self.table, n)
        cache_init(&self.cache, cache_capacity)
        stall_init(&self.stall, stall_check, stall_shutdown, 0)
        self.clock = 0

    def respond(self, list payloads, double now=0.0, clock=None):
        """One slow round: clock defaults to one more than the last round's."""
        cdef vector[Span] spans
        cdef Span sp
        cdef bytes b
        cdef string out
        if len(payloads) != self.n:
            raise ValueError(f"{len(payloads)} payloads for {self.n} ranks")
        self.clock = self.clock + 1 if clock is None else clock
        for b in payloads:          # views into the bytes objects, which the list keeps alive
            sp.p = b
            sp.n = len(b)
            spans.push_back(sp)
        with nogil:
            out = controller_respond(&self.table, &self.cache, spans, now, self.clock, &self.stall)
        return <bytes>out

    def waiting(self):
        """{name: ranks that submitted it} for names not yet ready everywhere."""
        out = {}
        it = self.table.entries.begin()
        while it != self.table.entries.end():
            out[deref(it).first.decode("utf-8", "surrogateescape")] = \
                [r for r in range(self.n) if deref(it).second.have[r]]
            inc(it)
        return out

    def cache_slots(self):
        """{name: slot}, or {name: [slots]} for a name held in several variants."""
        out = {}
        for s in range(self.cache.capacity):
            if not self.cache.names[s].empty():
                name = self.cache.names[s].decode("utf-8", "surrogateescape")
                out[name] = s if name not in out else (
                    out[name] + [s] if isinstance(out[name], list) else [out[name], s])
        return out

    def lookup(self, name, meta):
        """A worker's cache lookup: slot (hit), -1 (miss) or -2 (STALE: drop the name's
        variants everywhere)."""
        cdef bytes bname = name if isinstance(name, bytes) else name.encode("utf-8", "surrogateescape")
        cdef Meta m
        m.collective, m.dtype, m.op, m.root, m.algorithm = meta[0], meta[1], meta[2], meta[3], meta[4]
        m.shape = [int(d) for d in meta[5]]
        m.error = (meta[6] if len(meta) > 6 else "").encode()
        m.apart = bool(meta[7]) if len(meta) > 7 else 0
        return cache_lookup(&self.cache, bname, m)
