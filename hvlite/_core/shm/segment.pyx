"""Shared-memory all-reduce among the ranks of one node.

MPI's intra-node all-reduce moves every byte through its message cells several times; here the
ranks of a node map one segment and work in it directly. Each rank copies its input into its own
slot; then either every rank reduces all slots into its output (one barrier per segment: the
cheapest when L is small or the buffer is), or each rank reduces its 1/L slice of the slots into a
shared result area and everyone copies the result out (reduce-scatter + copy-out: each byte is
reduced once). Slices are reduced in slot order 0..L-1, so every rank gets the same bits.

Synchronisation is one epoch counter per rank in the control page (release store, acquire
loads), never an MPI call. Slots and result areas come in two parities: a buffer of parity
e & 1 is written only before barrier e and read only after it, so its next writer (before barrier
e + 2) cannot overtake a reader (done before it signalled e + 1). That is what lets the large-buffer
loop copy segment k + 1 in while segment k is being reduced, with one barrier per segment.

Cost (L ranks, n bytes, m bytes per segment): ceil(n/m) + 1 barriers of ~L flag reads each, plus
per rank a copy in (n), a reduction reading n (sliced) or L·n (redundant), and a copy out (n).
The segment is POSIX shared memory, unlinked as soon as every rank has mapped it: nothing is left
in /dev/shm even when a rank is killed. Its name carries the host name and random bits besides
the pid (hosts with PID namespaces of their own may share one /dev/shm), and only the rank whose
exclusive create succeeded ever unlinks it: a failed create never removes another job's segment.
"""
import os
from libc.errno cimport errno
from libc.stdlib cimport free
from libc.string cimport memcpy, memset, strncpy
from libc.stdio cimport fprintf, stderr
from libc.stdint cimport uint64_t
from posix.mman cimport shm_open, shm_unlink, mmap, munmap, PROT_READ, PROT_WRITE, MAP_SHARED, MAP_FAILED
from posix.fcntl cimport O_CREAT, O_EXCL, O_RDWR
from posix.unistd cimport ftruncate, close
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.kernels.reduce cimport (copy_divided, divide_by, reduce_into, reduce_to,
                                          fill_identity)
from hvlite._core.algorithms.p2p cimport block_start, comm_size
from hvlite._core.codes cimport HV_ERR_SHM, HV_ERR_LOST, HV_ERR_DESYNC
from hvlite._core.liveness cimport watch_current, watch_begin, watch_poll

from hvlite._core.kernels.stream cimport hv_prefetch, hv_stream_copy_ahead

cdef extern from "fcntl.h" nogil:
    int posix_fallocate(int fd, long offset, long length)

cdef extern from "<sys/mman.h>" nogil:
    int MAP_POPULATE

cdef extern from *:
    """
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    #define HV_EPOCH_LOW 4
    #else
    #define HV_EPOCH_LOW 0
    #endif
    """
    int EPOCH_LOW "HV_EPOCH_LOW"     # offset of an epoch's low 32 bits (a futex word is 32 bits)

from hvlite._core.sync cimport (hv_load64, hv_store64, hv_load, hv_add, hv_fence, hv_pause,
                                hv_yield, hv_now, hv_futex_wait, hv_futex_wake)

cdef enum:
    LINE = 64                # one cache line per rank: its epoch counter (8 bytes; the low
                             # word is what sleepers wait on), its liveness beat (at 8) and
    SLEEPERS = 16            # the count of the node's threads asleep on its epoch, and
    VOTE = 24                # shm_and_words' tag and epoch, one pair per parity (16 bytes each)
    CHUNK = 16384            # bytes reduced at a time, so the accumulator stays in L1
    MIN_SEG = 65536          # smallest segment tried when /dev/shm is short of space
    SPIN = 256               # flag checks before yielding,
    YIELDS = 64              # then yields before sleeping: a waiting thread that yields for
                             # long takes the core from the compute of the rank beside it
                             # (4096 yields: whole training steps 8-25% slower; yielding while
                             # each yield came back at once, up to 1 ms: GPT 3-6% slower,
                             # benchmarks.md)

_names = [0]


def segment_name(int pid):
    """`/hvlite-<pid>-<n>-<host>-<random>`: the pid and a counter say which process made it (the
    launcher's cleanup and the tests look for `hvlite-<pid>-`); the host name and 64 random bits
    keep two hosts, or two PID namespaces, that share /dev/shm from choosing the same name."""
    import secrets
    import socket
    _names[0] += 1
    host = "".join(c if c.isalnum() or c in "._" else "_" for c in socket.gethostname())[:64]
    return f"/hvlite-{pid}-{_names[0]}-{host or 'host'}-{secrets.token_hex(8)}".encode()


cdef inline size_t _ctrl_bytes(int L) noexcept nogil:
    return (<size_t>L * LINE + 4095) // 4096 * 4096


cdef inline char* _slot(ShmArea* a, int r, int parity) noexcept nogil:
    return a.base + _ctrl_bytes(a.L) + (<size_t>(2 * r + parity)) * a.seg


cdef inline char* _result(ShmArea* a, int parity) noexcept nogil:
    return a.base + _ctrl_bytes(a.L) + (<size_t>(2 * a.L + parity)) * a.seg


cdef inline size_t _slice_start(size_t count, int L, int j, size_t es) noexcept nogil:
    """Start of rank j's slice, on a 64-byte boundary so no two ranks write one cache line."""
    cdef size_t unit = LINE // es
    cdef size_t s = block_start((count + unit - 1) // unit, L, j) * unit
    return s if s < count else count


cdef void _barrier(ShmArea* a) noexcept nogil:
    """Wait until every rank of the node has passed this epoch: spin, then yield a few times,
    then sleep on the late rank's epoch word (a futex in the shared segment) until it moves.
    The late rank wakes its sleepers when it arrives (it sees them counted in its line), so a
    rank that finished its compute first (a training step's first call) is back in the
    operation within a wake-up, not a sleep's length later (a 20 us nanosleep lasts ~70 us with
    the kernel's timer slack). A long wait polls the thread's liveness watch; once a peer is
    lost the area is marked (a.lost) and no barrier waits again, so the operation runs out and
    returns HV_ERR_LOST."""
    cdef int r
    cdef long spins
    cdef long long seen
    cdef bint asleep
    cdef double t0 = 0, next_poll = 0, now
    cdef char* line = a.base + a.me * LINE
    a.epoch += 1
    hv_store64(<volatile long long*>line, a.epoch)
    hv_fence()                  # the store before the look at the sleepers (theirs: the reverse)
    if hv_load(<int*>(line + SLEEPERS)) > 0:
        a.woke += 1
        hv_futex_wake(<int*>(line + EPOCH_LOW))
    for r in range(a.L):
        spins = 0
        asleep = False
        line = a.base + r * LINE
        while not a.lost:
            seen = hv_load64(<volatile long long*>line)
            if seen >= a.epoch:
                break
            spins += 1
            if spins < SPIN:
                hv_pause()
            elif spins < SPIN + YIELDS:
                hv_yield()
            elif not asleep:    # counted first, then one more look before sleeping
                asleep = True
                a.slept += 1
                hv_add(<int*>(line + SLEEPERS), 1)
                hv_fence()
                if t0 == 0:
                    t0 = next_poll = hv_now()
                    watch_begin(watch_current())
            else:
                now = hv_now()
                if now >= next_poll:
                    next_poll = now + 2e-3
                    if watch_poll(watch_current(), now - t0) >= 0:
                        a.lost = HV_ERR_LOST
                        break
                # returns at once if the word moved since `seen` was read
                a.woken += hv_futex_wait(<int*>(line + EPOCH_LOW), <int>seen, 2e-3)
        if asleep:
            hv_add(<int*>(line + SLEEPERS), -1)


cdef char* shm_slot(ShmArea* a, int r, int parity) noexcept nogil:
    return _slot(a, r, parity)


cdef void shm_reduce_slots(ShmArea* a, int parity, size_t offset, size_t count, int dtype, int op,
                           const char* own, char* dst, long divisor) noexcept nogil:
    _reduce(a, parity, offset, count, dtype, op, own, dst, NULL, divisor)


cdef void shm_gather(const ShmPiece* p, size_t np, size_t a, size_t b, char* dst, int dtype,
                     int op) noexcept nogil:
    _gather(p, np, a, b, dst, dtype, op)


cdef void shm_scatter(const ShmPiece* p, size_t np, size_t a, size_t b, const char* src,
                      int dtype, bint stream, hv_prefetch* ahead) noexcept nogil:
    _move(p, np, a, b, <char*>src, dtype, 0, False, stream, ahead)


cdef size_t shm_slice_start(size_t count, int L, int j, size_t es) noexcept nogil:
    return _slice_start(count, L, j, es)


cdef char* shm_beats(ShmArea* a, size_t* stride) noexcept nogil:
    """The node's liveness beat words (liveness.pyx), one per rank beside its epoch, or NULL."""
    stride[0] = LINE
    return a.base + 8 if a.base != NULL else NULL


cdef int shm_sleepers(ShmArea* a) noexcept nogil:
    return hv_load(<int*>(a.base + a.me * LINE + SLEEPERS)) if a.base != NULL else 0


cdef int shm_barrier(ShmArea* a) noexcept nogil:
    _barrier(a)
    return a.lost


cdef int shm_and_words(ShmArea* a, uint64_t* words, int n, uint64_t tag) noexcept nogil:
    """The negotiation round's agreement on one node: each rank's words into its slot, one
    barrier, then every rank ANDs every slot (the order does not matter, so every rank gets the
    same bits). A few flag reads instead of MPI messages. A nonzero `tag` stands for the words
    (equal tags: equal words; negotiation/wire.pxd's bits_tag): it goes into the rank's
    control line, which the barrier has just brought into each peer's cache, and a peer whose
    tag equals this rank's is not read at all (a steady loop's rounds, all voting for the same
    one slot, read no slot: on 2 ranks a barrier() 0.05 us faster). Beside the tag each rank
    puts its barrier count: every use of the segment must take the same barriers on every
    rank, and a rank one barrier off would read slots not yet written and, later, wait for
    ever; the round checks it (one word) and fails with HV_ERR_DESYNC instead."""
    cdef int p = (a.epoch + 1) & 1, r, i
    cdef const uint64_t* other
    cdef const uint64_t* vote
    cdef uint64_t* mine = <uint64_t*>_slot(a, a.me, p)
    cdef uint64_t* own = <uint64_t*>(a.base + a.me * LINE + VOTE + 16 * p)
    memcpy(mine, words, <size_t>n * 8)      # always: a peer whose tag differs reads them
    own[0] = tag
    own[1] = <uint64_t>(a.epoch + 1)
    _barrier(a)                             # (its epoch store releases the words above)
    if a.lost:
        return a.lost
    for r in range(a.L):
        if r != a.me:
            vote = <const uint64_t*>(a.base + r * LINE + VOTE + 16 * p)
            if vote[1] != <uint64_t>a.epoch:
                fprintf(stderr, b"hvlite: internal error: node rank %d is at shared-segment barrier %lld, node rank %d at %lld\n",
                        a.me, a.epoch, r, <long long>vote[1])
                return HV_ERR_DESYNC
            if tag != 0 and vote[0] == tag:
                continue
            other = <const uint64_t*>_slot(a, r, p)
            for i in range(n):
                words[i] &= other[i]
    return 0


cdef inline size_t _carry_off(int n) noexcept nogil:
    """Where data riding with a vote of n words start in the slot: on the line after them."""
    return (<size_t>n * 8 + LINE - 1) // LINE * LINE


cdef size_t shm_preload_room(ShmArea* a, int n) noexcept nogil:
    if a.base == NULL or a.L < 2 or a.seg <= _carry_off(n):
        return 0
    return a.seg - _carry_off(n)


cdef void shm_preload(ShmArea* a, int n, size_t at, const char* src, size_t nbytes) noexcept nogil:
    if src != NULL and nbytes:
        memcpy(_slot(a, a.me, (a.epoch + 1) & 1) + _carry_off(n) + at, src, nbytes)


cdef void shm_arm_preload(ShmArea* a, int n, size_t nbytes) noexcept nogil:
    a.pre_epoch = a.epoch
    a.pre_bytes = nbytes
    a.pre_off = _carry_off(n)


cdef void shm_disarm(ShmArea* a) noexcept nogil:
    a.pre_epoch = -1


cdef bint shm_preloaded(ShmArea* a, size_t nbytes) noexcept nogil:
    """Only the copy-in right after the vote's barrier, and of the agreed size (0: each rank's
    own, an allgather's): any barrier since (a collective that went another way) leaves the
    slots to their next writers."""
    if a.pre_epoch != a.epoch or (nbytes and a.pre_bytes != nbytes):
        return False
    a.pre_epoch = -1
    a.carried += 1
    a.credit = a.pre_seconds
    return True


cdef char* shm_carried(ShmArea* a, int r) noexcept nogil:
    return _slot(a, r, a.epoch & 1) + a.pre_off


cdef double shm_barrier_seconds(ShmArea* a, int reps) noexcept nogil:
    """Seconds per flag barrier: the median of 5 blocks of reps/5 (all of the node's ranks must
    call it). A mean let one descheduled rank swing it from 0.03 to 448 us between runs."""
    cdef double t0, x
    cdef double blocks[5]
    cdef int i, b, j, per = reps // 5 if reps >= 5 else 1
    if a.base == NULL:
        return 0.0
    _barrier(a)
    for b in range(5):
        t0 = hv_now()
        for i in range(per):
            _barrier(a)
        x = (hv_now() - t0) / per
        j = b
        while j > 0 and blocks[j - 1] > x:       # insertion sort
            blocks[j] = blocks[j - 1]
            j -= 1
        blocks[j] = x
    return blocks[2]


cdef inline const char* _operand(ShmArea* a, int r, int parity, size_t at, const char* own,
                                 size_t own_at) noexcept nogil:
    """Rank r's elements at byte `at` of the slots, or this rank's from `own` where given."""
    return own + own_at if own != NULL and r == a.me else _slot(a, r, parity) + at


cdef void _reduce(ShmArea* a, int parity, size_t offset, size_t count, int dtype, int op,
                  const char* own, char* dst, char* dst2, long divisor) noexcept nogil:
    """dst (and dst2) = slot_0 op slot_1 op ... op slot_{L-1} over elements [offset, offset +
    count), chunk by chunk in an L1-resident accumulator (divided by `divisor` when > 1 as it
    is copied out: an Average costs no pass of its own). With `own` (this rank's data for the same elements)
    this rank's contribution is read from there instead of its slot."""
    cdef double acc_mem[2048]         # CHUNK bytes, 8-byte aligned
    cdef char* acc = <char*>acc_mem
    cdef size_t es = dtype_size(dtype), step = CHUNK // es, done = 0, n, at
    cdef int r
    while done < count:
        n = count - done if count - done < step else step
        at = (offset + done) * es
        # the first two in one pass, no copy of the first into acc (L > 1: the segment exists)
        reduce_to(acc, _operand(a, 0, parity, at, own, done * es),
                  _operand(a, 1, parity, at, own, done * es), n, dtype, op)
        for r in range(2, a.L):
            reduce_into(acc, _operand(a, r, parity, at, own, done * es), n, dtype, op)
        copy_divided(dst + done * es, acc, n, dtype, divisor)     # divided as it is copied
        if dst2 != NULL:
            memcpy(dst2 + done * es, dst + done * es, n * es)
        done += n


cdef inline void _copy_except(char* dst, const char* src, size_t n, size_t lo, size_t hi,
                              size_t es) noexcept nogil:
    """Copy elements [0, n) but [lo, hi): the parts of a segment other ranks reduce."""
    memcpy(dst, src, lo * es)
    memcpy(dst + hi * es, src + hi * es, (n - hi) * es)


cdef inline int _across(allreduce_fn cross_fn, char* buf, size_t count, int dtype, int op,
                        MPI_Comm cross, Scratch* s, long divisor) noexcept nogil:
    """The nodes' all-reduce of this rank's part; divisor > 1: it divides as it finishes."""
    s.divisor = divisor if divisor > 1 else 0
    cdef int err = cross_fn(buf, count, dtype, op, cross, s)
    s.divisor = 0
    return err


cdef int _redundant(ShmArea* a, const char* src, char* dst, size_t count, int dtype, int op,
                    long divisor) noexcept nogil:
    """Every rank reduces every slot, one barrier per segment: src into this rank's slot, then
    dst = every slot reduced, this rank's part read from src (dst may be src: in place)."""
    cdef size_t es = dtype_size(dtype), per = a.seg // es, off, n, k
    cdef size_t nseg = (count + per - 1) // per
    cdef int p
    if nseg == 1 and shm_preloaded(a, count * es):   # every rank's src rode with the vote
        _reduce(a, a.epoch & 1, a.pre_off // es, count, dtype, op, src, dst, NULL, divisor)
        return a.lost
    for k in range(nseg):
        off = k * per
        n = count - off if count - off < per else per
        p = (a.epoch + 1) & 1
        memcpy(_slot(a, a.me, p), src + off * es, n * es)
        _barrier(a)
        _reduce(a, p, 0, n, dtype, op, src + off * es, dst + off * es, NULL, divisor)
    return a.lost


cdef int shm_allreduce(char* buf, size_t count, int dtype, int op, ShmArea* a,
                       MPI_Comm cross, bint uniform, allreduce_fn cross_fn, Scratch* s,
                       long divisor) noexcept nogil:
    cdef size_t es = dtype_size(dtype), per = a.seg // es, off, n, lo, hi, nlo, nhi, nn, nseg, k
    # The mode must be the same on every rank of the node: it depends on the job having several
    # nodes, not on this rank's cross communicator (uneven nodes leave some ranks alone in it).
    cdef bint has_cross = cross_fn != NULL
    cdef bint talk = has_cross and comm_size(cross) > 1
    cdef bint leaders = has_cross and not uniform
    cdef int p, q, err = 0
    cdef char* seg
    cdef long after = 1         # with other nodes, an Average divides after the nodes' sum:
    if has_cross:               # inside the cross algorithm, or here where there is none
        after, divisor = divisor, 1
    if count == 0:
        return 0
    nseg = (count + per - 1) // per
    if a.L == 1:
        # Alone on the node: the other nodes' leaders reduce segment by segment, so must we.
        for k in range(nseg):
            if talk and err == 0:
                off = k * per
                err = _across(cross_fn, buf + off * es, count - off if count - off < per else per,
                              dtype, op, cross, s, after)
        if after > 1 and not talk and err == 0:
            divide_by(buf, count, dtype, after)
        return err
    if a.base == NULL:
        return HV_ERR_SHM
    if not has_cross and (count if count < per else per) * es <= a.redundant_max:
        return _redundant(a, buf, buf, count, dtype, op, divisor)
    # Sliced (or, on uneven nodes, by the leader): segment k + 1 is copied in while segment k is
    # reduced, one barrier per segment. A rank copies in only what the others reduce, reduces
    # its slice from its own buffer and the others' slots, and copies the others' slices out.
    n = count if count < per else per
    lo, hi = _slice_bounds(n, a, es, leaders)
    _copy_except(_slot(a, a.me, (a.epoch + 1) & 1), buf, n, lo, hi, es)
    _barrier(a)
    for k in range(nseg):
        off = k * per
        n = count - off if count - off < per else per
        seg = buf + off * es
        lo, hi = _slice_bounds(n, a, es, leaders)
        p = a.epoch & 1
        q = p ^ 1
        if hi > lo:
            _reduce(a, p, lo, hi - lo, dtype, op, seg + lo * es, _result(a, q) + lo * es,
                    NULL if has_cross else seg + lo * es, divisor)
            if talk and err == 0:
                err = _across(cross_fn, _result(a, q) + lo * es, hi - lo, dtype, op, cross, s,
                              after)
            elif after > 1:
                divide_by(_result(a, q) + lo * es, hi - lo, dtype, after)
            if has_cross:
                memcpy(seg + lo * es, _result(a, q) + lo * es, (hi - lo) * es)
        if k + 1 < nseg:
            nn = count - off - per if count - off - per < per else per
            nlo, nhi = _slice_bounds(nn, a, es, leaders)
            _copy_except(_slot(a, a.me, q), seg + per * es, nn, nlo, nhi, es)
        _barrier(a)          # every rank passes it even after an error, so none is left waiting
        _copy_except(seg, _result(a, q), n, lo, hi, es)
    return err if err else a.lost


cdef inline (size_t, size_t) _slice_bounds(size_t n, ShmArea* a, size_t es, bint leaders) noexcept nogil:
    """This rank's part of an n-element segment: its 1/L slice, or (by the leader) all of it."""
    cdef size_t none = 0
    if leaders:
        if a.me == 0:
            return none, n
        return none, none
    return _slice_start(n, a.L, a.me, es), _slice_start(n, a.L, a.me + 1, es)


cdef size_t _find(const ShmPiece* p, size_t np, size_t at) noexcept nogil:
    """The piece holding virtual element `at` (binary search over the starts)."""
    cdef size_t lo = 0, hi = np, mid
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if p[mid].start <= at:
            lo = mid
        else:
            hi = mid
    while lo + 1 < np and p[lo].start + p[lo].count <= at:
        lo += 1              # skip empty pieces
    return lo


cdef void _move(const ShmPiece* p, size_t np, size_t a, size_t b, char* buf, int dtype, int op,
               bint gather, bint stream, hv_prefetch* ahead=NULL) noexcept nogil:
    """Between buf and batch elements [a, b): gather copies each piece's input into buf (the
    op's identity where it has none); scatter copies buf into each piece's output (if any),
    past the cache with `stream` where the output is not the input (prefetching `ahead`
    meanwhile)."""
    cdef size_t es = dtype_size(dtype), i, take, end, at
    if a >= b:
        return
    i = _find(p, np, a)
    while a < b:
        end = p[i].start + p[i].count
        take = (end if end < b else b) - a
        if take:
            at = (a - p[i].start) * es
            if not gather:
                if p[i].output != NULL and p[i].output == p[i].input:
                    memcpy(p[i].output + at, buf, take * es)
                elif p[i].output != NULL and stream:    # not read by this batch: no line fills
                    hv_stream_copy_ahead(p[i].output + at, buf, take * es, ahead)
                elif p[i].output != NULL:
                    memcpy(p[i].output + at, buf, take * es)
            elif p[i].input != NULL:
                memcpy(buf, p[i].input + at, take * es)
            else:
                fill_identity(buf, take, dtype, op)
            buf += take * es
            a += take
        i += 1


cdef inline void _gather(const ShmPiece* p, size_t np, size_t a, size_t b, char* dst, int dtype,
                         int op) noexcept nogil:
    _move(p, np, a, b, dst, dtype, op, True, False)


cdef inline void _scatter(const ShmPiece* p, size_t np, size_t a, size_t b, const char* src,
                          int dtype, bint stream) noexcept nogil:
    _move(p, np, a, b, <char*>src, dtype, 0, False, stream)


cdef void _reduce_to_pieces(ShmArea* a, int parity, size_t off, size_t count, int dtype, int op,
                            const ShmPiece* p, size_t np, long divisor, bint stream) noexcept nogil:
    """Every slot's elements [0, count) reduced in slot order, straight into the pieces' outputs
    for virtual elements [off, off + count)."""
    cdef double acc_mem[2048]
    cdef char* acc = <char*>acc_mem
    cdef size_t es = dtype_size(dtype), step = CHUNK // es, done = 0, n
    cdef int r
    while done < count:
        n = count - done if count - done < step else step
        reduce_to(acc, _slot(a, 0, parity) + done * es, _slot(a, 1, parity) + done * es, n,
                  dtype, op)      # (L > 1 here)
        for r in range(2, a.L):
            reduce_into(acc, _slot(a, r, parity) + done * es, n, dtype, op)
        if divisor > 1:
            divide_by(acc, n, dtype, divisor)
        _scatter(p, np, off + done, off + done + n, acc, dtype, stream)
        done += n


cdef inline void _gather_except(const ShmPiece* p, size_t np, size_t off, size_t n, size_t lo,
                                size_t hi, char* slot, int dtype, int op) noexcept nogil:
    """Segment [off, off + n) of the batch into slot, but this rank's slice [lo, hi)."""
    cdef size_t es = dtype_size(dtype)
    _gather(p, np, off, off + lo, slot, dtype, op)
    _gather(p, np, off + hi, off + n, slot + hi * es, dtype, op)


cdef void _fold(const ShmPiece* p, size_t np, size_t a, size_t b, char* acc, const char* src,
                bint own_first, int dtype, int op) noexcept nogil:
    """acc (batch elements [a, b), contiguous) takes this rank's inputs in one pass, with no copy
    of them first: acc op= inputs; or with `src` (another rank's elements) acc = inputs op src
    (`own_first`) or src op inputs. A piece with no input (a joined rank) is the op's identity,
    reduced as gather's copy of it was."""
    cdef double ident[2048]         # CHUNK bytes
    cdef size_t es = dtype_size(dtype), i, take, end
    cdef const char* x
    if a >= b:
        return
    i = _find(p, np, a)
    while a < b and i < np:
        end = p[i].start + p[i].count
        take = (end if end < b else b) - a
        if take:
            if p[i].input != NULL:
                x = p[i].input + (a - p[i].start) * es
            else:
                fill_identity(<char*>ident, take, dtype, op)
                x = <const char*>ident
            if src == NULL:
                reduce_into(acc, x, take, dtype, op)
            elif own_first:
                reduce_to(acc, x, src, take, dtype, op)
            else:
                reduce_to(acc, src, x, take, dtype, op)
            acc += take * es
            if src != NULL:
                src += take * es
            a += take
        i += 1


cdef void _reduce_slice_pieces(ShmArea* a, int parity, size_t off, size_t lo, size_t hi, int dtype,
                               int op, const ShmPiece* p, size_t np, char* result,
                               long divisor, bint stream) noexcept nogil:
    """result[lo:hi) and the pieces' outputs for batch elements [off + lo, off + hi) = the slots
    reduced in slot order, this rank's own contribution read from its inputs."""
    cdef double acc_mem[2048]
    cdef char* acc = <char*>acc_mem
    cdef size_t es = dtype_size(dtype), step = CHUNK // es, at = lo, n
    cdef int r
    while at < hi:
        n = hi - at if hi - at < step else step
        # in slot order, this rank's inputs folded in where they come (not gathered into a
        # buffer first), the first two operands in one pass (L > 1 here)
        if a.me == 0:
            _fold(p, np, off + at, off + at + n, acc, _slot(a, 1, parity) + at * es, True,
                  dtype, op)
        elif a.me == 1:
            _fold(p, np, off + at, off + at + n, acc, _slot(a, 0, parity) + at * es, False,
                  dtype, op)
        else:
            reduce_to(acc, _slot(a, 0, parity) + at * es, _slot(a, 1, parity) + at * es, n,
                      dtype, op)
        for r in range(2, a.L):
            if r == a.me:
                _fold(p, np, off + at, off + at + n, acc, NULL, True, dtype, op)
            else:
                reduce_into(acc, _slot(a, r, parity) + at * es, n, dtype, op)
        copy_divided(result + at * es, acc, n, dtype, divisor)
        _scatter(p, np, off + at, off + at + n, result + at * es, dtype, stream)
        at += n


cdef int shm_allreduce_pieces(const ShmPiece* p, size_t np, size_t count, int dtype, int op,
                              ShmArea* a, long divisor) noexcept nogil:
    cdef size_t es = dtype_size(dtype), per = a.seg // es, off, n, lo, hi, nn, nseg, k
    cdef bint stream = count * es >= SHM_STREAM_MIN
    cdef int pa, q
    if count == 0:
        return 0
    if a.base == NULL or a.L == 1:
        return HV_ERR_SHM
    nseg = (count + per - 1) // per
    if (count if count < per else per) * es <= a.redundant_max:
        if np == 1 and p[0].input != NULL and p[0].output != NULL and p[0].count == count:
            # A lone tensor out of place: as in place, reading this rank's part from its input
            # and writing the result once, without the accumulator's extra copy (4 KiB, 2 ranks:
            # the pieces' way cost ~0.3 us more than in place)
            return _redundant(a, p[0].input, p[0].output, count, dtype, op, divisor)
        for k in range(nseg):
            off = k * per
            n = count - off if count - off < per else per
            pa = (a.epoch + 1) & 1
            _gather(p, np, off, off + n, _slot(a, a.me, pa), dtype, op)
            _barrier(a)
            _reduce_to_pieces(a, pa, off, n, dtype, op, p, np, divisor, stream)
        return a.lost
    # As shm_allreduce: gather only what the others reduce, reduce this rank's slice from its own
    # inputs (through an L1 buffer) and the others' slots, scatter it from the accumulator.
    n = count if count < per else per
    _gather_except(p, np, 0, n, _slice_start(n, a.L, a.me, es), _slice_start(n, a.L, a.me + 1, es),
                   _slot(a, a.me, (a.epoch + 1) & 1), dtype, op)
    _barrier(a)
    for k in range(nseg):
        off = k * per
        n = count - off if count - off < per else per
        lo = _slice_start(n, a.L, a.me, es)
        hi = _slice_start(n, a.L, a.me + 1, es)
        pa = a.epoch & 1
        q = pa ^ 1
        _reduce_slice_pieces(a, pa, off, lo, hi, dtype, op, p, np, _result(a, q), divisor,
                             stream)
        if k + 1 < nseg:
            nn = count - off - per if count - off - per < per else per
            _gather_except(p, np, off + per, nn, _slice_start(nn, a.L, a.me, es),
                           _slice_start(nn, a.L, a.me + 1, es), _slot(a, a.me, q), dtype, op)
        _barrier(a)
        _scatter(p, np, off, off + lo, _result(a, q), dtype, stream)
        _scatter(p, np, off + hi, off + n, _result(a, q) + hi * es, dtype, stream)
    return a.lost


cdef int shm_open_area(ShmArea* a, object local, size_t seg_bytes, size_t redundant_max,
                       bint enabled) except -1:
    from mpi4py import MPI
    cdef int L = local.Get_size(), me = local.Get_rank(), fd = -1
    cdef size_t seg = (seg_bytes + LINE - 1) // LINE * LINE, total = 0
    cdef void* base = MAP_FAILED
    cdef bint created = False
    memset(a, 0, sizeof(ShmArea))
    a.pre_epoch = -1
    a.L, a.me, a.redundant_max = L, me, redundant_max
    why = ""
    if not enabled:
        shm_set_why(a, "disabled (HVLITE_SHM=0)")
        return 0
    if L == 1:
        return 0                 # nothing to share; shm_allreduce needs no segment
    shared = local.Split_type(MPI.COMM_TYPE_SHARED, key=me)
    same_host = shared.Get_size() == L
    shared.Free()
    if not same_host:
        shm_set_why(a, "the node's ranks do not share memory")
        return 0
    name = b""
    if me == 0:
        name = segment_name(os.getpid())
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0o600)
        if fd < 0:
            why = f"shm_open({name.decode()}): {os.strerror(errno)}"
        created = fd >= 0
        while fd >= 0:
            total = _ctrl_bytes(L) + (2 * <size_t>L + 2) * seg
            # Reserve the pages now: a short /dev/shm fails here, not with SIGBUS mid-collective.
            if ftruncate(fd, total) == 0 and posix_fallocate(fd, 0, total) == 0:
                break
            if seg // 2 < MIN_SEG:
                why = f"/dev/shm has no room for {total} bytes"
                close(fd)
                shm_unlink(name)
                created = False
                fd = -1
                break
            seg //= 2
    name, seg, why = local.bcast((name, seg, why) if me == 0 else None, root=0)
    total = _ctrl_bytes(L) + (2 * <size_t>L + 2) * seg
    if not why:
        if me != 0:
            fd = shm_open(name, O_RDWR, 0o600)
        if fd >= 0:
            # Populated now: the first calls through a slot would otherwise pay its page faults
            # (1 MiB on 2 ranks: 480 us against 60), and auto's trials are the first calls.
            base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)
            close(fd)
        if base == MAP_FAILED:
            why = f"mapping {name.decode()}: {os.strerror(errno)}"
    failed = local.allgather(why)
    if created:
        shm_unlink(name)     # every rank has it mapped (or gave up): the name is no longer needed
    why = next((w for w in failed if w), "")
    if why:
        if base != MAP_FAILED:
            munmap(base, total)
        shm_set_why(a, why)
        return 0
    a.base, a.map_bytes, a.seg = <char*>base, total, seg
    return 0


cdef void shm_set_why(ShmArea* a, str why):
    b = why.encode()[:159]
    strncpy(a.why, b, 159)


cdef void shm_close_area(ShmArea* a) noexcept nogil:
    free(a.direct_scratch)
    a.direct_scratch = NULL
    if a.base != NULL:
        munmap(a.base, a.map_bytes)
        a.base = NULL

