"""Broadcast and allgather among the ranks of one node, through its shared segment.

The collectives that only move bytes take the same path as the shm all-reduce: whoever holds
bytes copies them into its slot, one flag barrier, everyone copies out. On one node that is a
barrier and two memcpys where MPI's calls cost a message round trip and a copy through its cells
(4 KiB at 2 ranks: the segment's round is about a microsecond). Large buffers go through in
segments, alternating slot parities, so the next segment is copied in while the last is read.
Used only when the whole set is one node with a segment (the coordinator decides, the same on
every rank).
"""
# distutils: language = c++
from libc.stdlib cimport malloc
from libc.string cimport memcpy
from libc.stdint cimport int64_t, uint64_t, INT64_MAX
from libcpp.vector cimport vector
from hvlite._core.shm.segment cimport ShmArea, shm_slot, shm_barrier
from hvlite._core.codes cimport HV_ERR_COUNT, nomem

cdef enum:
    HEAD = 64       # a slot's first line holds the count; rows that fit follow it


cdef int shm_broadcast(ShmArea* a, char* buf, size_t nbytes, int root) noexcept nogil:
    """buf of rank `root` (its index on the node) into everyone's buf, segment by segment."""
    cdef size_t off = 0, n
    cdef int p, err
    while off < nbytes:
        n = nbytes - off if nbytes - off < a.seg else a.seg
        p = (a.epoch + 1) & 1
        if a.me == root:
            memcpy(shm_slot(a, root, p), buf + off, n)
        err = shm_barrier(a)
        if err:
            return err
        if a.me != root:
            memcpy(buf + off, shm_slot(a, root, p), n)
        off += n
    return 0


cdef int shm_allgather(ShmArea* a, const char* input, int64_t rows, size_t row_bytes,
                       char** result, int64_t* total_rows, vector[int64_t]& all_rows,
                       bint same_rows) noexcept nogil:
    """Every rank's rows, in rank order, into a result allocated here at its final size
    (mpi_collectives' allgather, through the segment). The counts always go through the
    segment: `same_rows` is this rank's belief, and a rank that has joined holds none while the
    others' cache hit says all are equal; skipping the exchange on some ranks only would leave
    the node's barriers out of step (a hang). Rows that fit a slot beside the count travel with
    it: one barrier in all (a small allgather took two)."""
    cdef int r, p, err
    cdef size_t off = 0, n, mine = <size_t>rows * row_bytes, most = 0, b, room = a.seg - HEAD
    cdef char* out = NULL
    cdef vector[size_t] at
    all_rows.resize(a.L)
    p = (a.epoch + 1) & 1
    memcpy(shm_slot(a, a.me, p), &rows, sizeof(int64_t))
    if mine <= room:
        memcpy(shm_slot(a, a.me, p) + HEAD, input, mine)
    err = shm_barrier(a)
    if err:
        return err
    for r in range(a.L):
        memcpy(&all_rows[r], shm_slot(a, r, p), sizeof(int64_t))
    total_rows[0] = 0
    at.resize(a.L)
    for r in range(a.L):        # a peer's count is checked before it sizes anything
        if all_rows[r] < 0 or (row_bytes and <uint64_t>all_rows[r] > <uint64_t>INT64_MAX // row_bytes
                                or (<uint64_t>total_rows[0] + <uint64_t>all_rows[r]) * row_bytes
                                > <uint64_t>INT64_MAX):
            return HV_ERR_COUNT         # every rank read the same counts: all return here
        at[r] = <size_t>total_rows[0] * row_bytes
        total_rows[0] += all_rows[r]
        b = <size_t>all_rows[r] * row_bytes
        most = b if b > most else most
    out = <char*>malloc(<size_t>total_rows[0] * row_bytes + 1)
    result[0] = out
    if most <= room:            # every rank's rows came with its count
        if out == NULL:
            return nomem(<size_t>total_rows[0] * row_bytes + 1)
        for r in range(a.L):
            memcpy(out + at[r], shm_slot(a, r, p) + HEAD, <size_t>all_rows[r] * row_bytes)
        return 0
    while off < most:           # through every barrier even without a result: none is left waiting
        n = most - off if most - off < a.seg else a.seg
        p = (a.epoch + 1) & 1
        if off < mine:
            memcpy(shm_slot(a, a.me, p), input + off, mine - off if mine - off < n else n)
        err = shm_barrier(a)
        if err:
            return err
        for r in range(a.L):
            b = <size_t>all_rows[r] * row_bytes
            if off < b and out != NULL:
                memcpy(out + at[r] + off, shm_slot(a, r, p), b - off if b - off < n else n)
        off += n
    return 0 if out != NULL else nomem(<size_t>total_rows[0] * row_bytes + 1)
