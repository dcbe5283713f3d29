"""Negotiation on cache misses: rank 0 collects what each rank has submitted, and once a name
is submitted everywhere (or its missing ranks have joined) checks that every rank agrees on it
and answers, for all ranks, in one order.

Wire format: little strings of int64 fields. A rank's payload is a header
[stopping, joined] then records [kind, name, meta, age]. Rank 0's response is
[stopping ranks...], [fatal, message], [joined now, joined during this round], then records
[name, status, slot, meta, message, value, late ranks].
"""
# distutils: language = c++
from cython.operator cimport dereference as deref, preincrement as inc
from libc.stdio cimport snprintf
from libc.string cimport memcpy
from libc.stdint cimport int64_t
from hvlite._core.request cimport *
from hvlite._core.codes cimport *
from hvlite._core.cache cimport Cache, cacheable, cache_pick_slot, cache_put

cdef extern from "<algorithm>" namespace "std" nogil:
    void sort[Iter, Compare](Iter first, Iter last, Compare comp)

cdef extern from "stdio.h" nogil:
    ctypedef struct FILE
    FILE* stderr
    int fprintf(FILE*, const char*, ...)
    int fflush(FILE*)

cdef Meta _first_meta(Entry* e, int n) noexcept nogil:
    cdef int r
    for r in range(n):
        if e.have[r]:
            return e.metas[r]
    return e.metas[0]


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


cdef int64_t get_i64(Reader* r) noexcept nogil:
    cdef int64_t v = 0
    if r.off + 8 <= r.n:
        memcpy(&v, r.p + r.off, 8)
    r.off += 8
    return v


cdef string get_str(Reader* r) noexcept nogil:
    cdef int64_t n = get_i64(r)
    cdef string s
    if n > 0 and r.off + <size_t>n <= r.n:
        s.assign(r.p + r.off, <size_t>n)
    r.off += <size_t>n
    return s


cdef void get_meta(Reader* r, Meta* m) noexcept nogil:
    cdef int64_t i, nd
    m.collective = <int>get_i64(r)
    m.dtype = <int>get_i64(r)
    m.op = <int>get_i64(r)
    m.root = <int>get_i64(r)
    m.algorithm = <int>get_i64(r)
    nd = get_i64(r)
    m.shape.clear()
    for i in range(nd):
        m.shape.push_back(get_i64(r))
    m.error = get_str(r)


cdef void table_init(Table* t, int n) noexcept nogil:
    t.entries.clear()
    t.next_order = 0
    t.joined.assign(n, 0)
    t.join_time.assign(n, -1)
    t.join_clock = 0


cdef void _append_int(string& s, int64_t v) noexcept nogil:
    cdef char buf[32]
    cdef int k = snprintf(buf, 32, "%lld", <long long>v)
    s.append(buf, k)


cdef string int_to_str(int64_t v) noexcept nogil:
    cdef string s
    _append_int(s, v)
    return s


cdef string describe_shape(const vector[int64_t]& shape) noexcept nogil:
    cdef string s = string(b"(")
    cdef size_t i
    for i in range(shape.size()):
        if i:
            s.append(b", ")
        _append_int(s, shape[i])
    if shape.size() == 1:
        s.append(b",")
    s.append(b")")
    return s


cdef string _name(const char* const* table, int n, int i, const char* fallback) noexcept nogil:
    if 0 <= i < n:
        return string(table[i])
    return string(fallback)


cdef string _field(const Meta& m, int field) noexcept nogil:
    cdef vector[int64_t] tail
    cdef string s2
    if field == 0:
        return _name(HV_COLLECTIVE_NAMES, C_COUNT, m.collective, b"?")
    if field == 1:
        return _name(HV_DTYPE_NAMES, DT_COUNT, m.dtype, b"unsupported")
    if field == 2:
        return _name(HV_OP_NAMES, OP_COUNT, m.op, b"invalid")
    if field == 3:
        _append_int(s2, m.root)
        return s2
    if field == 4:
        return _name(HV_ALGORITHM_NAMES, ALG_COUNT, m.algorithm, b"invalid")
    if field == 5:
        return describe_shape(m.shape)
    # 6: trailing dimensions (allgather, alltoall)
    if m.shape.size() > 0:
        tail.assign(m.shape.begin() + 1, m.shape.end())
    return describe_shape(tail)


cdef const char* FIELD_NAMES[7]
FIELD_NAMES[:] = [b"collective", b"dtype", b"op", b"root rank", b"algorithm", b"shape",
                  b"shape after the first dimension"]


cdef string _agreement(const string& name, Entry* e, int n) noexcept nogil:
    """Empty when every submitting rank agrees; else a message naming each rank's value."""
    cdef string msg, first, v
    cdef int r, f, ref = -1, coll
    cdef bint differ
    for r in range(n):
        if e.have[r] and not e.metas[r].error.empty():
            msg.append(b"rank ")
            _append_int(msg, r)
            msg.append(b": ")
            msg.append(e.metas[r].error)
            msg.append(b"; ")
        if e.have[r] and ref < 0:
            ref = r
    coll = e.metas[ref].collective
    for f in range(7):
        if f == 3 and coll != C_BROADCAST:
            continue
        if f == 4 and coll != C_ALLREDUCE:
            continue
        if f == 5 and (coll == C_ALLGATHER or coll == C_ALLTOALL or coll == C_BARRIER or coll == C_JOIN):
            continue
        if f == 6 and not (coll == C_ALLGATHER or coll == C_ALLTOALL):
            continue
        first = _field(e.metas[ref], f)
        differ = False
        for r in range(n):
            if e.have[r] and _field(e.metas[r], f) != first:
                differ = True
        if not differ:
            continue
        msg.append(b"ranks disagree on ")
        msg.append(FIELD_NAMES[f])
        msg.append(b": ")
        for r in range(n):
            if e.have[r]:
                msg.append(b"rank ")
                _append_int(msg, r)
                msg.append(b": ")
                msg.append(_field(e.metas[r], f))
                msg.append(b", ")
        msg.resize(msg.size() - 2)
        msg.append(b"; ")
        if f == 0:
            break       # other fields mean nothing across different collectives
    if msg.empty():
        return msg
    msg.resize(msg.size() - 2)
    cdef string head = _name(HV_COLLECTIVE_NAMES, C_COUNT, coll, b"collective")
    head.append(b" '")
    head.append(name)
    head.append(b"' failed on every rank: ")
    head.append(msg)
    return head


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
            _append_int(s, r)
    return s


cdef struct Ready:
    int64_t order
    const string* name


cdef bint _before(const Ready& a, const Ready& b) noexcept nogil:
    return a.order < b.order


cdef string _missing(Entry* e, vector[char]& probed, vector[char]& joined, int n) noexcept nogil:
    cdef string s = string(b"[")
    cdef int r
    cdef bint first = True
    for r in range(n):
        if not (e.have[r] or probed[r] or joined[r]):
            if not first:
                s.append(b", ")
            _append_int(s, r)
            first = False
    s.append(b"]")
    return s


cdef string rank0_respond(Table* t, Cache* cache, vector[string]& payloads, int n, double now,
                          double stall_check, double stall_shutdown, int64_t clock) noexcept nogil:
    cdef Reader rd
    cdef int r, joined_now = 0, last = -1, joined_after
    cdef int64_t kind, count = 0
    cdef double age
    cdef string name, out, body, fatal, line
    cdef Meta meta
    cdef vector[int64_t] stopping
    cdef unordered_map[string, vector[char]] probes
    cdef unordered_map[string, double] probe_age
    cdef vector[Ready] ready
    cdef Ready item
    cdef Entry* e
    cdef bint ok
    cdef int slot
    # 1. fold in every rank's payload
    for r in range(n):
        rd.p = payloads[r].data()
        rd.n = payloads[r].size()
        rd.off = 0
        if rd.n == 0:
            continue
        if get_i64(&rd):
            stopping.push_back(r)
        get_i64(&rd)        # joined flag (informational; the JOIN record itself counts)
        while rd.off < rd.n:
            kind = get_i64(&rd)
            name = get_str(&rd)
            get_meta(&rd, &meta)
            age = <double>get_i64(&rd) * 1e-6
            if kind == REC_PROBE:
                if probes.find(name) == probes.end():
                    probes[name].assign(n, 0)
                probes[name][r] = 1
                if age > probe_age[name]:
                    probe_age[name] = age
                continue
            if meta.collective == C_JOIN:
                t.joined[r] = 1
                t.join_time[r] = t.join_clock
                t.join_clock += 1
            e = &t.entries[name]
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
                e.metas[r] = meta
                e.count += 1
    for r in range(n):
        joined_now += t.joined[r]
    # 2. which names are ready everywhere, in first-submitted order
    cdef unordered_map[string, Entry].iterator ti = t.entries.begin()
    while ti != t.entries.end():
        e = &deref(ti).second
        ok = True
        for r in range(n):
            if not e.have[r] and (not t.joined[r] or _first_meta(e, n).collective == C_JOIN):
                ok = False
                break
        if ok:
            item.order = e.order
            item.name = &deref(ti).first
            ready.push_back(item)
        inc(ti)
    sort(ready.begin(), ready.end(), _before)
    for item in ready:
        name = item.name[0]
        e = &t.entries[name]
        meta = _first_meta(e, n)
        line = _agreement(name, e, n)
        if line.empty() and joined_now and meta.collective != C_JOIN and meta.collective != C_BARRIER:
            if meta.collective == C_ALLTOALL or meta.collective == C_REDUCESCATTER:
                line = _name(HV_COLLECTIVE_NAMES, C_COUNT, meta.collective, b"?")
                line.append(b" '")
                line.append(name)
                line.append(b"' cannot run while some ranks have joined")
            elif meta.collective == C_BROADCAST and t.joined[meta.root] and not e.have[meta.root]:
                line = string(b"broadcast '")
                line.append(name)
                line.append(b"': its root rank has already joined")
        put_str(body, name)
        put_i64(body, RESP_ERROR if not line.empty() else RESP_OK)
        slot = -1
        if line.empty() and cache.capacity > 0 and cacheable(meta.collective):
            slot = cache_pick_slot(cache)
            cache.last_used[slot] = clock
        put_i64(body, slot)
        put_meta(body, meta)
        put_str(body, line)
        last = -1
        if meta.collective == C_JOIN and line.empty():
            for r in range(n):
                if last < 0 or t.join_time[r] > t.join_time[last]:
                    last = r
            t.joined.assign(n, 0)
            t.join_time.assign(n, -1)
        put_i64(body, last)
        put_str(body, _late(e, n))
        count += 1
        if slot >= 0:
            cache_put(cache, slot, name, meta)
        t.entries.erase(name)
    # 3. stall report: names some rank has waited on for too long, and who has not submitted
    cdef vector[char] none, flags
    cdef unordered_map[string, vector[char]].iterator pi
    none.assign(n, 0)
    if stall_check > 0:
        ti = t.entries.begin()
        while ti != t.entries.end():
            name = deref(ti).first
            e = &deref(ti).second
            inc(ti)
            age = now - e.first_seen
            if probe_age.find(name) != probe_age.end() and probe_age[name] > age:
                age = probe_age[name]
            if age < stall_check:
                continue
            line = string(b"hvlite: stall: ")
            line.append(_name(HV_COLLECTIVE_NAMES, C_COUNT, _first_meta(e, n).collective, b"?"))
            line.append(b" '")
            line.append(name)
            line.append(b"' has waited ")
            _append_int(line, <int64_t>age)
            line.append(b" s; ranks that have not submitted it: ")
            if probes.find(name) != probes.end():
                line.append(_missing(e, probes[name], t.joined, n))
            else:
                line.append(_missing(e, none, t.joined, n))
            fprintf(stderr, "%s\n", line.c_str())
            if stall_shutdown > 0 and age >= stall_shutdown and fatal.empty():
                fatal = line.substr(8)
                fatal.append(b" (HVLITE_STALL_SHUTDOWN_TIME_SECONDS exceeded)")
        pi = probes.begin()
        while pi != probes.end():
            name = deref(pi).first
            flags = deref(pi).second
            inc(pi)
            if t.entries.find(name) != t.entries.end():
                continue
            age = probe_age[name]
            if age < stall_check:
                continue
            line = string(b"hvlite: stall: '")
            line.append(name)
            line.append(b"' has waited ")
            _append_int(line, <int64_t>age)
            line.append(b" s; ranks that have not submitted it: [")
            ok = True
            for r in range(n):
                if not flags[r] and not t.joined[r]:
                    if not ok:
                        line.append(b", ")
                    _append_int(line, r)
                    ok = False
            line.append(b"]")
            fprintf(stderr, "%s\n", line.c_str())
            if stall_shutdown > 0 and age >= stall_shutdown and fatal.empty():
                fatal = line.substr(8)
                fatal.append(b" (HVLITE_STALL_SHUTDOWN_TIME_SECONDS exceeded)")
        fflush(stderr)
    put_i64(out, <int64_t>stopping.size())
    for r in range(<int>stopping.size()):
        put_i64(out, stopping[r])
    put_i64(out, 0 if fatal.empty() else 1)
    put_str(out, fatal)
    joined_after = 0
    for r in range(n):
        joined_after += t.joined[r]
    put_i64(out, joined_after)
    put_i64(out, joined_now)       # ranks contributing nothing to this round's work
    put_i64(out, count)
    out.append(body)
    return out


