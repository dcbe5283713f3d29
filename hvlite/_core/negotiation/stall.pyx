"""Stall inspection (Horovod's stall inspector). A rank whose oldest submission has waited
HVLITE_STALL_CHECK_TIME_SECONDS asks for a report (a flag in the round's bit vector) and sends
rank 0 a probe per name it waits on; rank 0 prints which ranks have not submitted each stalled
name, and past HVLITE_STALL_SHUTDOWN_TIME_SECONDS turns the first such line into a fatal error.
"""
# distutils: language = c++
from cython.operator cimport dereference as deref, preincrement as inc
from libc.stdint cimport int64_t
from hvlite._core.codes cimport C_JOIN, C_COUNT, HV_COLLECTIVE_NAMES
from hvlite._core.negotiation.table cimport Entry, first_meta
from hvlite._core.negotiation.describe cimport append_int, append_name, code_name

cdef extern from "stdio.h" nogil:
    ctypedef struct FILE
    FILE* stderr
    int fprintf(FILE*, const char*, ...)
    int fflush(FILE*)


cdef void stall_init(Stall* s, double check, double shutdown, double now) noexcept nogil:
    s.check = check
    s.shutdown = shutdown
    s.last = now


cdef bint stall_due(Stall* s, double now, double oldest) noexcept nogil:
    """At most one report per check interval, and only while something has waited that long;
    and one as soon as the shutdown time has passed, whenever the last report was, so the
    StallError comes on time."""
    if s.check <= 0 or now - oldest < s.check:
        return False
    if now - s.last >= s.check or (s.shutdown > 0 and now - oldest >= s.shutdown and
                                   s.last < oldest + s.shutdown):
        s.last = now
        return True
    return False


cdef void stall_note(Probes* p, const string& name, int r, int n, double age) noexcept nogil:
    if p.ranks.find(name) == p.ranks.end():
        p.ranks[name].assign(n, 0)
    p.ranks[name][r] = 1
    if age > p.age[name]:
        p.age[name] = age


cdef string _missing(Entry* e, vector[char]& probed, vector[char]& joined, int n) noexcept nogil:
    """Ranks that neither submitted nor probe the name, nor have joined: "[1, 3]"."""
    cdef string s = string(b"[")
    cdef int r
    cdef bint first = True
    for r in range(n):
        if not ((e != NULL and e.have[r]) or probed[r] or joined[r]):
            if not first:
                s.append(b", ")
            append_int(s, r)
            first = False
    s.append(b"]")
    return s


cdef void _emit(const Stall* s, string& line, double age, string* fatal) noexcept nogil:
    """Print one report line; the first past the shutdown time becomes the fatal message."""
    fprintf(stderr, "%s\n", line.c_str())
    if s.shutdown > 0 and age >= s.shutdown and fatal.empty():
        fatal[0] = line.substr(8)       # without "hvlite: "
        fatal.append(b" (HVLITE_STALL_SHUTDOWN_TIME_SECONDS exceeded)")


cdef void _report_entries(const Stall* s, Table* t, Probes* p, int n, double now, string* fatal) noexcept nogil:
    """Names in rank 0's table: submitted by some ranks, waited on too long."""
    cdef vector[char] none
    cdef string name, line
    cdef Entry* e
    cdef double age
    none.assign(n, 0)
    ti = t.entries.begin()
    while ti != t.entries.end():
        name = deref(ti).first
        e = &deref(ti).second
        inc(ti)
        age = now - e.first_seen
        if p.age.find(name) != p.age.end() and p.age[name] > age:
            age = p.age[name]
        if age < s.check:
            continue
        line = string(b"hvlite: stall: ")
        line.append(code_name(HV_COLLECTIVE_NAMES, C_COUNT, first_meta(e, n).collective, b"?"))
        line.append(b" '")
        append_name(line, name)
        line.append(b"' has waited ")
        append_int(line, <int64_t>age)
        line.append(b" s; ranks that have not submitted it: ")
        if p.ranks.find(name) != p.ranks.end():
            line.append(_missing(e, p.ranks[name], t.joined, n))
        else:
            line.append(_missing(e, none, t.joined, n))
        _emit(s, line, age, fatal)


cdef void _report_probes(const Stall* s, Table* t, Probes* p, int n, string* fatal) noexcept nogil:
    """Names only probed (cache hits some ranks wait on), not in the table."""
    cdef string name, line
    cdef double age
    pi = p.ranks.begin()
    while pi != p.ranks.end():
        name = deref(pi).first
        inc(pi)
        if t.entries.find(name) != t.entries.end():
            continue
        age = p.age[name]
        if age < s.check:
            continue
        line = string(b"hvlite: stall: '")
        append_name(line, name)
        line.append(b"' has waited ")
        append_int(line, <int64_t>age)
        line.append(b" s; ranks that have not submitted it: ")
        line.append(_missing(NULL, p.ranks[name], t.joined, n))
        _emit(s, line, age, fatal)


cdef string stall_report(const Stall* s, Table* t, Probes* p, int n, double now) noexcept nogil:
    cdef string fatal
    if s.check <= 0:
        return fatal
    _report_entries(s, t, p, n, now, &fatal)
    _report_probes(s, t, p, n, &fatal)
    fflush(stderr)
    return fatal
