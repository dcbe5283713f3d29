"""Broadcast, allgather and alltoall among the ranks of one node, through its shared segment.

The collectives that only move bytes take the same path as the shm all-reduce: whoever holds
bytes copies them into its slot, one flag barrier, everyone copies out. On one node that is a
barrier and two memcpys where MPI's calls cost a message round trip and a copy through its cells
(4 KiB at 2 ranks: the segment's round is about a microsecond). Large buffers go through in
segments, alternating slot parities, so the next segment is copied in while the last is read.
Used only when the whole set is one node with a segment (the coordinator decides, the same on
every rank); a broadcast only below SHM_COPY_MAX bytes (copy.pxd).

Where the node's ranks can read each other's memory (ShmArea.direct, agreed at init: shm/cma.pyx)
an allgather's or alltoall's rank with enough bytes to send (copy.pxd) leaves them in its own
buffer and publishes its address instead; the others read them from there with one kernel copy
each (process_vm_readv) straight into their results, and a last barrier keeps the buffer alive until every reader is
done. That barrier also agrees whether every read went through (cma_agree): a read the
kernel refuses fails the call on every rank alike (an alltoall then takes MPI's path on every
rank), never on one rank alone. One copy instead of two: through the slots every byte was
copied in, then out again (allgather 1.5-2.2x Intel MPI's time from 16 KiB to 4 MiB,
docs/benchmarks.md).
"""
# distutils: language = c++
from hvlite._core.memory cimport result_into
from libc.stdlib cimport free
from libc.string cimport memcpy
from libc.stdint cimport int64_t, uint64_t, INT64_MAX
from libcpp.vector cimport vector
from posix.unistd cimport getpid
from hvlite._core.shm.cma cimport cma_read, cma_agree
from hvlite._core.shm.segment cimport (ShmArea, shm_slot, shm_barrier, shm_preloaded, shm_carried,
                                       shm_preload, shm_preload_room)
from hvlite._core.codes cimport HV_ERR_COUNT, HV_ERR_SHM, nomem
from hvlite._core.request cimport splits_fit

cdef enum:
    HEAD = 64       # a slot's first line holds the count (and pid, address, flag); rows follow
    BCAST_PIECE_MIN = 64 << 10  # a broadcast's smallest piece (_bcast_piece)
    IN_SLOT = 1     # the flag: this rank's bytes are in its slot (else read them at the address)


cdef inline size_t _bcast_piece(ShmArea* a, size_t nbytes) noexcept nogil:
    """A broadcast's pieces: a quarter of it on whole lines, from BCAST_PIECE_MIN up to a slot.
    While the peers copy piece k out, the root copies piece k + 1 into the other parity's slot,
    so the two copies overlap (in one slot-sized piece they took turns). The same on every rank:
    nbytes and the slot size are."""
    cdef size_t q = (nbytes // 4 + 63) // 64 * 64
    if q < BCAST_PIECE_MIN:
        q = BCAST_PIECE_MIN
    return q if q < a.seg else a.seg


cdef int shm_broadcast(ShmArea* a, char* buf, size_t nbytes, int root) noexcept nogil:
    """buf of rank `root` (its index on the node) into everyone's buf, segment by segment. (Read
    straight from the root's buf it was slower where the ranks call together: the root's copy
    in and the peers' copies out run at once here, docs/benchmarks.md.)"""
    cdef size_t off = 0, n, piece = _bcast_piece(a, nbytes)
    cdef int p, err
    if shm_preloaded(a, nbytes):        # the root's bytes rode with the vote
        if a.me != root:
            memcpy(buf, shm_carried(a, root), nbytes)
        return 0
    while off < nbytes:
        n = nbytes - off if nbytes - off < piece else piece
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
                       bint same_rows, char* into, size_t into_bytes) noexcept nogil:
    """Every rank's rows, in rank order, into a result allocated here at its final size
    (mpi_collectives' allgather, through the segment). The counts always go through the
    segment: `same_rows` is only this rank's belief, and skipping the exchange on some ranks
    only would leave the node's barriers out of step (a hang). Rows that fit a slot beside the
    count travel with it: one barrier in all (a small allgather took two). Where the ranks may
    read each other, rows from DIRECT_COPY_MIN bytes stay in the input (its pid and address
    beside the count, the slot's flag clear): every rank sees it in the slots, reads those rows
    from the sender, copies the others' from their slots, and passes one more barrier."""
    cdef int r, p, err = 0
    cdef size_t off = 0, n, mine = <size_t>rows * row_bytes, most = 0, b, room = a.seg - HEAD
    cdef size_t base = 0        # where the count lies in a slot (further in where it rode)
    cdef char* out = NULL
    cdef vector[size_t] at
    cdef int64_t* h
    cdef bint carried = shm_preloaded(a, 0), direct = False
    all_rows.resize(a.L)
    if carried:                 # every rank's count and rows rode with the vote (beside it)
        p = a.epoch & 1
        base = a.pre_off
        room -= base
    else:
        p = (a.epoch + 1) & 1
        h = <int64_t*>shm_slot(a, a.me, p)
        h[0] = rows
        h[1] = <int64_t>getpid()
        h[2] = <int64_t>(<uint64_t>input)
        h[3] = 0
        if mine <= room and not direct_whole(a, mine):
            memcpy(shm_slot(a, a.me, p) + HEAD, input, mine)
            h[3] = IN_SLOT
        err = shm_barrier(a)
        if err:
            return err
    for r in range(a.L):
        h = <int64_t*>(shm_slot(a, r, p) + base)
        all_rows[r] = h[0]
        # some rank's rows are still in its buffer: every rank sees it (the same slots) and
        # reads those directly, then passes the last barrier (on two-rank nodes: copy.pxd;
        # elsewhere rows past a slot go through it segment by segment, as without `direct`)
        if not carried and a.direct and a.L == 2 and not (h[3] & IN_SLOT) and h[0] != 0:
            direct = True
    total_rows[0] = 0
    at.resize(a.L)
    for r in range(a.L):        # a peer's count is checked before it sizes anything
        # the rows' total too: rows of zero bytes cost nothing, so only their count can wrap
        if all_rows[r] < 0 or <uint64_t>total_rows[0] + <uint64_t>all_rows[r] > <uint64_t>INT64_MAX or (
                row_bytes and (<uint64_t>all_rows[r] > <uint64_t>INT64_MAX // row_bytes
                               or (<uint64_t>total_rows[0] + <uint64_t>all_rows[r]) * row_bytes
                               > <uint64_t>INT64_MAX)):
            return HV_ERR_COUNT         # every rank read the same counts: all return here
        at[r] = <size_t>total_rows[0] * row_bytes
        total_rows[0] += all_rows[r]
        b = <size_t>all_rows[r] * row_bytes
        most = b if b > most else most
    out = result_into(into, into_bytes, <size_t>total_rows[0] * row_bytes)
    result[0] = out
    if direct:
        a.read_direct += 1
        for r in range(a.L if out != NULL else 0):
            b = <size_t>all_rows[r] * row_bytes
            h = <int64_t*>shm_slot(a, r, p)
            if b == 0:
                continue
            if r == a.me:
                memcpy(out + at[r], input, b)
            elif h[3] & IN_SLOT:
                memcpy(out + at[r], <char*>h + HEAD, b)
            else:
                err = cma_read(h[1], out + at[r], <uint64_t>h[2], b)
                if err:
                    break
        err = cma_agree(a, err)     # every buffer stays until its readers are done
        if err:
            return err
        return 0 if out != NULL else nomem(<size_t>total_rows[0] * row_bytes + 1)
    if most <= room:            # every rank's rows came with its count
        if out == NULL:
            return nomem(<size_t>total_rows[0] * row_bytes + 1)
        for r in range(a.L):
            memcpy(out + at[r], shm_slot(a, r, p) + base + HEAD, <size_t>all_rows[r] * row_bytes)
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


cdef size_t shm_allgather_carry(ShmArea* a, int n, const char* input, int64_t rows,
                                size_t nbytes) noexcept nogil:
    if HEAD + nbytes > shm_preload_room(a, n):
        return 0
    shm_preload(a, n, 0, <const char*>&rows, sizeof(int64_t))
    shm_preload(a, n, HEAD, input, nbytes)
    return HEAD + nbytes


cdef inline void _put_parts(char* slot, size_t head, size_t q, const char* input,
                            const vector[size_t]& send_at, const vector[int64_t]& splits,
                            size_t row_bytes, size_t off) noexcept nogil:
    """Round `off` of every destination's part into this rank's slot: bytes [off, off + q)."""
    cdef size_t j, b
    for j in range(splits.size()):
        b = <size_t>splits[j] * row_bytes
        if off < b:
            memcpy(slot + head + j * q, input + send_at[j] + off, b - off if b - off < q else q)


cdef inline void _take_parts(ShmArea* a, int p, size_t head, size_t q, char* out,
                             const vector[size_t]& at, const vector[size_t]& recv_from,
                             size_t off) noexcept nogil:
    """Round `off` of every rank's part for this one, from their slots into the result."""
    cdef size_t b
    cdef int r
    for r in range(a.L):
        b = recv_from[r]
        if off < b:
            memcpy(out + at[r] + off, shm_slot(a, r, p) + head + <size_t>a.me * q,
                   b - off if b - off < q else q)


cdef inline size_t _alltoall_head(int L) noexcept nogil:
    """Bytes of an alltoall slot's splits, then its pid, input address and flag, on whole
    lines."""
    return (<size_t>(L + 3) * sizeof(int64_t) + HEAD - 1) // HEAD * HEAD


cdef inline size_t _alltoall_part(size_t room, int L) noexcept nogil:
    """Bytes of each destination's part in a slot of `room` bytes (0: not one byte fits)."""
    cdef size_t head = _alltoall_head(L), q = (room - head) // <size_t>L if head < room else 0
    return q // HEAD * HEAD if q >= HEAD else q        # parts on their own cache lines


cdef size_t shm_alltoall_carry(ShmArea* a, int n, const char* input, int64_t rows,
                               const vector[int64_t]& splits, size_t row_bytes) noexcept nogil:
    cdef size_t room = shm_preload_room(a, n), head = _alltoall_head(a.L)
    cdef size_t q = _alltoall_part(room, a.L), off = 0, b
    cdef int j
    if q == 0 or not splits_fit(splits, <size_t>a.L, rows):
        return 0
    for j in range(a.L):        # every part in the first round (splits_fit: no wrap below)
        if row_bytes and <size_t>splits[j] > q // row_bytes:
            return 0
    shm_preload(a, n, 0, <const char*>splits.data(), <size_t>a.L * sizeof(int64_t))
    for j in range(a.L):
        b = <size_t>splits[j] * row_bytes
        shm_preload(a, n, head + <size_t>j * q, input + off, b)
        off += b
    return 1


cdef int _alltoall_direct(ShmArea* a, int p, size_t head, size_t q, const char* input,
                          size_t row_bytes, char* out, const vector[size_t]& at,
                          const vector[size_t]& recv_from, const vector[size_t]& send_at,
                          size_t got) noexcept nogil:
    """Each rank's part for this one into the result: this rank's own from its input, a peer's
    from its slot where it put it there (the first q bytes), the rest read from its input; then
    the last barrier, which keeps every input alive until its readers are done."""
    cdef int r, j, err = 0
    cdef size_t b, k, src
    cdef const int64_t* row
    a.read_direct += 1
    for r in range(a.L if out != NULL else 0):
        b = recv_from[r]
        if b == 0:
            continue
        if r == a.me:
            memcpy(out + at[r], input + send_at[r], b)
            continue
        row = <const int64_t*>shm_slot(a, r, p)
        k = 0
        if row[a.L + 2] & IN_SLOT:
            k = b if b < q else q
            memcpy(out + at[r], shm_slot(a, r, p) + head + <size_t>a.me * q, k)
        if b > k:
            src = 0                 # where rank r's part for this rank starts in its input
            for j in range(a.me):   # (its splits were checked: no wrap)
                src += <size_t>row[j] * row_bytes
            err = cma_read(row[a.L], out + at[r] + k, <uint64_t>row[a.L + 1] + src + k, b - k)
            if err:
                break
    err = cma_agree(a, err)
    if err:
        return err
    return 0 if out != NULL else nomem(got + 1)


cdef int shm_alltoall(ShmArea* a, const char* input, int64_t rows, const vector[int64_t]& splits,
                      size_t row_bytes, char** result, vector[int64_t]* recv_splits, char* into,
                      size_t into_bytes) noexcept nogil:
    """mpi_collectives' alltoall through the segment. A slot holds this rank's splits, then one
    part per destination rank: round i carries bytes [i*q, (i+1)*q) of each part, and the first
    round travels with the splits: in equal parts up to q bytes a part, one barrier in all.
    Every rank reads every rank's splits, so every rank checks all of them (non-negative, no
    64-bit wrap), reaches the same verdict and runs the same number of rounds. Splits this rank
    cannot send from its `rows` rows (splits_fit) go out as -1s: every rank refuses them
    together, and nothing is read. HV_ERR_SHM, before any exchange and on every rank, where a
    slot cannot hold the header and a part per rank, or after the exchange where a peer's part
    could not be read (every rank alike; the caller takes MPI's path). Where the
    ranks may read each other, a rank whose parts are large enough (direct_parts, copy.pxd) puts
    nothing in its slot but its pid and input address; where any rank did, or a part is larger
    than one round's share, every rank reads the parts from their senders (_alltoall_direct)
    instead of taking rounds."""
    cdef int L = a.L, r, j, p, err
    cdef bint carried = shm_preloaded(a, 0)     # the splits and every part rode with the vote
    cdef size_t base = a.pre_off if carried else 0      # the slot's layout starts here
    cdef size_t head = _alltoall_head(L), q = _alltoall_part(a.seg - base, L)
    cdef size_t most = 0, off, b
    cdef uint64_t sent, got = 0, got_rows = 0
    cdef int64_t v
    cdef bint ok = splits_fit(splits, <size_t>L, rows)
    cdef char* out = NULL
    cdef char* slot
    cdef vector[size_t] send_at, recv_from, at
    cdef int64_t* row
    cdef bint put, direct = False
    if q == 0:
        return HV_ERR_SHM
    send_at.resize(L)
    off = 0
    for j in range(L if ok else 0):
        send_at[j] = off
        off += <size_t>splits[j] * row_bytes
    if carried:
        p = a.epoch & 1
    else:
        p = (a.epoch + 1) & 1
        slot = shm_slot(a, a.me, p)
        for j in range(L):
            (<int64_t*>slot)[j] = splits[j] if ok else -1
        put = not direct_parts(a, off)      # off: every byte this rank sends (copy.pxd)
        (<int64_t*>slot)[L] = <int64_t>getpid()
        (<int64_t*>slot)[L + 1] = <int64_t>(<uint64_t>input)
        (<int64_t*>slot)[L + 2] = IN_SLOT if put else 0
        if ok and put:
            _put_parts(slot, head, q, input, send_at, splits, row_bytes, 0)
        err = shm_barrier(a)
        if err:
            return err
    head += base
    recv_splits.resize(L)
    recv_from.resize(L)
    at.resize(L)
    for r in range(L):          # a peer's splits are checked before they size anything
        row = <int64_t*>(shm_slot(a, r, p) + base)
        sent = 0
        for j in range(L):
            v = row[j]
            if v < 0 or (row_bytes and <uint64_t>v > <uint64_t>INT64_MAX // row_bytes):
                return HV_ERR_COUNT
            b = <size_t>v * row_bytes
            if sent + b > <uint64_t>INT64_MAX:
                return HV_ERR_COUNT
            if j == a.me:
                recv_from[r] = b
            sent += b
            most = b if b > most else most
        recv_splits[0][r] = row[a.me]
        at[r] = <size_t>got
        got += recv_from[r]
        got_rows += <uint64_t>row[a.me]      # rows of zero bytes: only their count can wrap
        if got > <uint64_t>INT64_MAX or got_rows > <uint64_t>INT64_MAX:
            return HV_ERR_COUNT
        if not carried and a.direct and not (row[L + 2] & IN_SLOT):
            direct = True       # the same slots on every rank: all or none read directly
    if not carried and a.direct and most > q:
        direct = True           # (a part past one round's: read, not copied round by round)
    out = result_into(into, into_bytes, <size_t>got)
    result[0] = out
    if direct:
        err = _alltoall_direct(a, p, head, q, input, row_bytes, out, at, recv_from, send_at,
                               <size_t>got)
        if err == HV_ERR_SHM:       # on every rank: the caller takes MPI's path, which allocates
            if out != NULL and out != into:
                free(out)
            result[0] = NULL
        return err
    off = 0
    while True:                 # every round's barrier even without a result: none is left waiting
        if out != NULL:
            _take_parts(a, p, head, q, out, at, recv_from, off)
        off += q
        if off >= most:
            break
        p = (a.epoch + 1) & 1
        _put_parts(shm_slot(a, a.me, p), head, q, input, send_at, splits, row_bytes, off)
        err = shm_barrier(a)
        if err:
            return err
    return 0 if out != NULL else nomem(<size_t>got + 1)
