"""The MPI side of a slow negotiation round, kept apart from the format so each can change alone:
the gather of submissions to rank 0 and the broadcast of its response (every round's agreement
on the cache bits is negotiation/agree.pyx's). Per slow round: Gather + Gatherv + 2 Bcast. Every call
is non-blocking and polled through liveness.wait_all, so a wait on a rank that never comes
answers pings, pulls idle peers in and ends when a peer is lost."""
# distutils: language = c++
from libc.stdint cimport int64_t
from libc.limits cimport INT_MAX
from hvlite._core.codes cimport HV_ERR_COUNT
from mpi4py.libmpi cimport *
from hvlite._core.liveness cimport wait_all
from hvlite._core.request cimport *
from hvlite._core.negotiation.wire cimport put_submission, put_record, REC_SUBMIT, REC_PROBE

cdef extern from "<algorithm>" namespace "std" nogil:
    void sort[It, F](It first, It last, F less)


cdef bint _submitted_before(Request* a, Request* b) noexcept nogil:
    return a.submitted < b.submitted


cdef int exchange_wait(MPI_Request* r) noexcept nogil:
    """Until done: spin, then yield, then sleep up to 1 ms between tests, so waiting for a late
    rank does not burn a core."""
    return wait_all(1, r, True)


cdef int64_t gather_layout(const int* lens, int* displs, int n) noexcept nogil:
    """Rank 0's offsets of the ranks' payloads in one buffer, summed in 64 bits: the total, or
    -1 where a length is negative or the total (with the buffer's closing byte) passes INT_MAX,
    MPI's int displacements."""
    cdef int64_t total = 0
    cdef int r
    for r in range(n):
        if lens[r] < 0 or total + lens[r] > INT_MAX - 1:
            return -1
        displs[r] = <int>total
        total += lens[r]
    return total


def _gather_layout(lens):
    """Tests: gather_layout on these lengths (C ints), as (total or None, offsets)."""
    cdef vector[int] c_lens = lens
    cdef vector[int] displs
    displs.resize(c_lens.size())
    total = gather_layout(c_lens.data(), displs.data(), <int>c_lens.size())
    return (None if total < 0 else total), list(displs)


cdef int exchange_gather(MPI_Comm comm, int rank, int n, const string& payload, vector[char]& buf,
                          vector[Span]& spans) noexcept nogil:
    """Rank 0 gathers every rank's payload. MPI's counts are int: a payload, or their sum, past
    INT_MAX (gigabytes of tensor names) is HV_ERR_COUNT on the rank that sees it, before any
    count could wrap; that rank's failure reaches the others through the liveness watch."""
    cdef int r, err, mine
    cdef int64_t total = 0
    cdef vector[int] lens, displs
    cdef Span sp
    if payload.size() > <size_t>INT_MAX:
        return HV_ERR_COUNT
    mine = <int>payload.size()
    lens.resize(n)
    displs.resize(n)
    cdef MPI_Request req
    err = MPI_Igather(&mine, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm, &req)
    if not err:
        err = exchange_wait(&req)
    if not err and rank == 0:
        total = gather_layout(lens.data(), displs.data(), n)
        if total < 0:
            return HV_ERR_COUNT
        buf.resize(<size_t>total + 1)
    if not err:
        err = MPI_Igatherv(<char*>payload.data(), mine, MPI_BYTE, buf.data(), lens.data(),
                           displs.data(), MPI_BYTE, 0, comm, &req)
    if not err:
        err = exchange_wait(&req)
    spans.clear()
    if not err and rank == 0:
        for r in range(n):
            sp.p = buf.data() + displs[r]
            sp.n = <size_t>lens[r]
            spans.push_back(sp)
    return err


cdef int exchange_bcast(MPI_Comm comm, int rank, string& resp) noexcept nogil:
    cdef int64_t len64 = <int64_t>resp.size()
    cdef MPI_Request req
    if rank == 0 and len64 > INT_MAX:       # MPI's count is int (see exchange_gather)
        return HV_ERR_COUNT
    cdef int err = MPI_Ibcast(&len64, 1, MPI_INT64_T, 0, comm, &req)
    if not err:
        err = exchange_wait(&req)
    if not err and (len64 < 0 or len64 > INT_MAX):
        return HV_ERR_COUNT
    if not err and rank != 0:
        resp.resize(<size_t>len64)
    if not err:
        err = MPI_Ibcast(resp.data(), <int>len64, MPI_BYTE, 0, comm, &req)
    if not err:
        err = exchange_wait(&req)
    return err


cdef void submission_message(string& payload, unordered_map[string, Request*]& pending,
                             bint stopping, bint joined, bint stall, double now) noexcept nogil:
    cdef Request* req
    cdef vector[Request*] misses
    put_submission(payload, stopping, joined)
    for kv in pending:
        req = kv.second
        if req.slot < 0 and not req.sent:
            misses.push_back(req)
    sort(misses.begin(), misses.end(), _submitted_before)
    for req in misses:
        put_record(payload, REC_SUBMIT, req.name, req.meta, <int64_t>((now - req.submitted) * 1e6))
        req.sent = True
    if not stall:
        return
    for kv in pending:
        req = kv.second
        if req.meta.collective != C_JOIN:
            put_record(payload, REC_PROBE, req.name, req.meta, <int64_t>((now - req.submitted) * 1e6))
