"""The coordinator's failure text: what a round waited on when a peer was lost or failed, and
what a rank tells its peers when it fails alone. Built only when something has gone wrong."""
# distutils: language = c++
from cython.operator cimport dereference as deref
from hvlite._core.codes cimport *
from hvlite._core.negotiation.describe cimport append_int, append_name, int_to_str, code_name


def shown(name, int limit=160):
    """A tensor name for a message: escaped (repr: a NUL or a newline shows as such), and a long
    one cut, with its length said."""
    text = repr(name)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 40]}...{text[-12:]} ({len(name)} characters)"


cdef string label(int collective, const string& name) noexcept nogil:
    cdef string s = string(code_name(HV_COLLECTIVE_NAMES, C_COUNT, collective, b"collective"))
    s.append(b" '")
    append_name(s, name)
    s.append(b"'")
    return s


cdef string doing(vector[Item]* items, int at, unordered_map[string, Request*]& pending) noexcept nogil:
    cdef string d
    cdef int shown = 0, k = 0
    cdef size_t i
    if items != NULL and 0 <= at < <int>items.size():
        return label(deref(items)[at].meta.collective, deref(items)[at].name)
    if items != NULL and at == -2:
        for i in range(items.size()):
            if deref(items)[i].meta.collective == C_ALLREDUCE:
                if k == 0:
                    d = label(C_ALLREDUCE, deref(items)[i].name)
                k += 1
        if k > 1:
            d.append(b" (fused with ")
            d.append(int_to_str(k - 1))
            d.append(b" more)")
        if k:
            return d
    d = string(b"a negotiation round")
    for kv in pending:
        if shown == 3:
            d.append(b", ...")
            break
        d.append(b" (waiting on " if shown == 0 else b", ")
        d.append(label(kv.second.meta.collective, kv.first))
        shown += 1
    if shown:
        d.append(b")")
    return d


cdef string out_of_memory(const Item* it, int64_t nbytes, int rank) noexcept nogil:
    cdef string why = string(b"out of memory: allocating ")
    append_int(why, nbytes)
    why.append(b" bytes for ")
    why.append(label(it.meta.collective, it.name))
    if it.fused > 1:
        why.append(b" (fused with ")
        append_int(why, it.fused - 1)
        why.append(b" more)")
    if it.req == NULL:
        why.append(b", a joined rank's contribution,")
    why.append(b" failed on rank ")
    append_int(why, rank)
    why.append(b"; every rank's collective fails with it, and MPI cannot go on")
    return why


cdef string peer_failed(int rank, const string& doing, const string& fail_text) noexcept nogil:
    cdef string why = string(b"rank ")
    why.append(int_to_str(rank))
    why.append(b" failed while this rank waited in ")
    why.append(doing)
    why.append(b": ")
    why.append(fail_text)
    return why


cdef string peer_lost(int rank, double silence, const string& doing) noexcept nogil:
    cdef string why = string(b"rank ")
    why.append(int_to_str(rank))
    why.append(b" is lost: it has not answered for ")
    why.append(int_to_str(<int64_t>(silence + 0.5)))
    why.append(b" s (HVLITE_LOST_RANK_SECONDS) while this rank waited in ")
    why.append(doing)
    why.append(b"; it was killed, stopped or exited without shutdown(), and MPI cannot go on "
               b"without it")
    return why


cdef string shut_down(vector[int64_t]& stopping) noexcept nogil:
    cdef string why = string(b"hvlite was shut down (shutdown() on rank ")
    cdef size_t i
    for i in range(stopping.size()):
        if i:
            why.append(b", ")
        why.append(int_to_str(stopping[i]))
    why.append(b") before this collective completed")
    return why


cdef string malformed_response(size_t off, size_t n) noexcept nogil:
    cdef string why = string(b"the negotiation response from rank 0 is malformed (a field at byte ")
    append_int(why, <int64_t>off)
    why.append(b" of ")
    append_int(why, <int64_t>n)
    why.append(b" runs past its end or holds an impossible value)")
    return why
