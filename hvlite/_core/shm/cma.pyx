"""The all-reduce on one node through the peers' buffers directly (cross-memory attach,
process_vm_readv and process_vm_writev) instead of through the segment's slots.

Through the slots every element is copied in, reduced and copied out: per rank about six passes
over memory for one reduction's worth of work, and on two cores memory is the limit (the fused
24 MB step). Here the segment carries only each rank's table of buffers (pid, each piece's
place in the batch and its input and output addresses):
  1. every rank publishes its table; one barrier;
  2. each rank reduces its 1/L slice of the batch a cache-sized chunk at a time: its own input
     and each peer's, read by the kernel straight from the peer's memory, in rank order, into
     its own outputs; then the chunk, still in the cache, goes straight into every peer's
     outputs (only this rank reads these elements' inputs, and it has read them all, so in
     place is safe too): written by the kernel, or where the output lies in the peer's shared
     output arena (shm/arena.pyx, mapped here at init) by this rank's own non-temporal stores,
     which unlike the kernel's do not read each fresh line first;
  3. one barrier, which also says whether every rank's reads and writes went through: every
     peer's writes into this rank's outputs are done, and no rank returns (letting its buffers
     go) while a peer still reaches into them.
Per rank that is about four passes over memory for its slice (the slots take six, and pulling
the result back from the peers' outputs after a second barrier took five). Every element is
reduced by one rank only, so every rank holds the same bits. A rank that has joined (no input
or no output), more pieces than the slot holds or a batch under (L - 1) x 256 KiB: every rank
sees it in the tables after the first barrier (or knows it before) and the caller takes the
slot path.

Whether the kernel lets the node's ranks read and write each other (same user; no Yama
restriction, or PR_SET_PTRACER) is tried once when the segment is opened, and agreed.
"""
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy, memset
from libc.stdint cimport int64_t, uint64_t
from posix.unistd cimport getpid
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.kernels.reduce cimport divide_by, reduce_into, reduce_to
from hvlite._core.codes cimport HV_ERR_SHM, HV_ERR_SHM_TABLE, HV_ERR_NOMEM
from hvlite._core.shm.segment cimport (ShmArea, ShmPiece, shm_slot, shm_barrier, shm_and_words,
                               shm_slice_start, shm_scatter, SHM_STREAM_MIN)

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void* iov_base
        size_t iov_len
    ssize_t process_vm_readv(int pid, const iovec* local, unsigned long liovcnt,
                             const iovec* remote, unsigned long riovcnt, unsigned long flags)
    ssize_t process_vm_writev(int pid, const iovec* local, unsigned long liovcnt,
                              const iovec* remote, unsigned long riovcnt, unsigned long flags)

from hvlite._core.kernels.stream cimport hv_prefetch, hv_stream_copy_ahead

cdef extern from "sync.h" nogil:
    double hv_now()
    void hv_sleep(double seconds)

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void** out, size_t alignment, size_t size)

cdef extern from "<sys/mman.h>" nogil:
    int madvise(void* addr, size_t length, int advice)

cdef extern from *:
    """
    #ifndef MADV_POPULATE_WRITE
    #define MADV_POPULATE_WRITE 23
    #endif
    """
    int MADV_POPULATE_WRITE

cdef extern from "<stdio.h>" nogil:
    ctypedef struct FILE
    FILE* fopen(const char* path, const char* mode)
    int fscanf(FILE* f, const char* fmt, ...)
    int fclose(FILE* f)

cdef extern from "<sys/prctl.h>" nogil:
    int prctl(int option, unsigned long arg2, unsigned long arg3, unsigned long arg4,
              unsigned long arg5)
    int PR_SET_PTRACER
    unsigned long PR_SET_PTRACER_ANY

cdef enum:
    HEAD = 4                # int64 words before the pieces: pid, npieces, flags, spare
    PER = 4                 # int64 words per piece: start, count, input, output
    NIOV = 512              # iovecs per side of one process_vm_readv (the kernel takes 1024)
    CHUNK = 65536           # bytes reduced at a time (L2-resident)
    F_NULL = 1              # a piece without input or output (a joined rank)


cdef bint direct_worth(ShmArea* a, size_t nbytes) noexcept nogil:
    """Whether a batch is large enough for this path: its two barriers and a kernel call per
    peer and chunk cost more than the slots' copies below (L - 1) x 256 KiB (measured: 256 KiB
    on 2 ranks 75-104 us here against 93-121 through the slots; on 4 ranks 410-428 against
    335-407, and 1 MiB 1.28-1.45x MPI against 1.23-1.30x)."""
    return nbytes >= <size_t>(a.L - 1) * (256 << 10)


cdef size_t direct_max_pieces(ShmArea* a) noexcept nogil:
    """Most pieces a table in one slot holds."""
    return (a.seg // 8 - HEAD) // PER


cdef struct Table:
    long long pid
    size_t np
    const int64_t* w        # the pieces, PER words each


cdef inline void _table(ShmArea* a, int r, int parity, Table* t) noexcept nogil:
    cdef const int64_t* s = <const int64_t*>shm_slot(a, r, parity)
    t.pid = s[0]
    t.np = <size_t>s[1]
    t.w = s + HEAD


cdef bint _same_pieces(const Table* t, const ShmPiece* p, size_t np) noexcept nogil:
    """A peer's table lays out the batch as this rank's own pieces do (the same tensors, so the
    same starts and counts): one that does not (damaged shared memory) would send the reads
    and writes below outside the buffers."""
    cdef size_t k
    if t.np != np:
        return False
    for k in range(np):
        if t.w[k * PER] != <int64_t>p[k].start or t.w[k * PER + 1] != <int64_t>p[k].count:
            return False
    return True


cdef size_t _find(const int64_t* w, size_t np, size_t at) noexcept nogil:
    """The piece holding batch element `at` (the last piece starting at or before it)."""
    cdef size_t lo = 0, hi = np, mid
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if <size_t>w[mid * PER] <= at:
            lo = mid
        else:
            hi = mid
    while lo + 1 < np and <size_t>(w[lo * PER] + w[lo * PER + 1]) <= at:
        lo += 1              # past empty pieces
    return lo


cdef size_t _input_iovs(const int64_t* w, size_t np, size_t a, size_t b, size_t es, iovec* out,
                        size_t cap, size_t* end) noexcept nogil:
    """iovecs of a table's inputs for batch elements [a, b), at most `cap` of them; *end: where
    they stop (b, or earlier when cap ran out)."""
    cdef size_t i = _find(w, np, a), n = 0, stop, take
    while a < b and n < cap and i < np:
        stop = <size_t>(w[i * PER] + w[i * PER + 1])
        take = (stop if stop < b else b) - a
        if take:
            out[n].iov_base = <void*>(<uint64_t>w[i * PER + 2] + (a - <size_t>w[i * PER]) * es)
            out[n].iov_len = take * es
            n += 1
            a += take
        i += 1
    end[0] = a
    return n


cdef iovec* _advance(iovec* v, size_t* n, size_t k) noexcept nogil:
    """Past the first k bytes of an iovec list (its count in *n updated)."""
    while k and n[0]:
        if v[0].iov_len <= k:
            k -= v[0].iov_len
            v += 1
            n[0] -= 1
        else:
            v[0].iov_base = <char*>v[0].iov_base + k
            v[0].iov_len -= k
            k = 0
    return v


cdef int _move(long long pid, iovec* loc, size_t nl, iovec* rem, size_t nr,
               bint write) noexcept nogil:
    """Read remote iovecs into local ones of the same total length (or write them from the
    local ones), resuming after a short transfer (the kernel may stop at a page it has to fault
    in)."""
    cdef ssize_t got
    while nl and nr:
        if write:
            got = process_vm_writev(<int>pid, loc, nl, rem, nr, 0)
        else:
            got = process_vm_readv(<int>pid, loc, nl, rem, nr, 0)
        if got <= 0:
            return HV_ERR_SHM
        loc = _advance(loc, &nl, <size_t>got)
        rem = _advance(rem, &nr, <size_t>got)
    return 0


cdef int cma_read(long long pid, char* dst, uint64_t src, size_t nbytes) noexcept nogil:
    cdef iovec loc, rem
    if nbytes == 0:
        return 0
    loc.iov_base = dst
    loc.iov_len = nbytes
    rem.iov_base = <void*>src
    rem.iov_len = nbytes
    return _move(pid, &loc, 1, &rem, 1, False)


cdef int cma_agree(ShmArea* a, int err) noexcept nogil:
    cdef uint64_t ok = 0 if err else ~(<uint64_t>0)
    cdef int e = shm_and_words(a, &ok, 1, (<uint64_t>1 << 63) | (ok & 1))     # ok: 0 or all ones
    if e:
        return e        # a peer lost at the barrier explains a read or write that failed too
    if err == 0 and not ok:
        return HV_ERR_SHM
    return err


cdef int _peer_inputs(const Table* t, size_t a, size_t b, size_t es, char* buf, iovec* loc,
                      iovec* rem) noexcept nogil:
    """A peer's inputs for batch elements [a, b) into the contiguous buf."""
    cdef size_t n, end, nbytes
    cdef int err
    while a < b:
        n = _input_iovs(t.w, t.np, a, b, es, rem, NIOV, &end)
        nbytes = (end - a) * es
        loc[0].iov_base = buf
        loc[0].iov_len = nbytes
        err = _move(t.pid, loc, 1, rem, n, False)
        if err:
            return err
        buf += nbytes
        a = end
    return 0


cdef double _mapping_pause = 0  # tests: seconds added to each _ready that maps pages
cdef long long _pages_mapped = 0    # pages of the peers' arenas _ready mapped here, all contexts


cdef double _ready(OutMap* to, size_t off, size_t length, size_t upto) noexcept nogil:
    """Pages [off, off + length) of the peer's arena mapped in this process's page tables before
    this rank stores there, with the rest of what it will store in this output (up to `upto`)
    in one call; the seconds that took. The peer populated its pages when it carved the block
    (arena.pyx), but only in its own mapping: here the first stores into each page faulted,
    8,192 of them in the first calls of a 64 MiB output on 2 ranks, ~10 ms; those calls are the
    ones auto's trials time (shm out of place measured 16-18 ms there and 7-8 ms later, and lost
    its trials to rd or rhd for the launch). Mapping them ahead costs about as much (~1 us a
    page), but in one place, so the caller takes this one-time cost out of the trial's time."""
    global _pages_mapped
    cdef size_t p = off >> 12, last = (off + length - 1) >> 12, end
    cdef double t0
    if to.mapped == NULL:
        return 0
    while p <= last and to.mapped[p >> 3] & (1 << (p & 7)):
        p += 1
    if p > last:
        return 0
    t0 = hv_now()
    end = max(min((upto + 4095) >> 12, to.cap >> 12), last + 1)
    madvise(to.map + (p << 12), (end - p) << 12, MADV_POPULATE_WRITE)  # (else the stores fault)
    _pages_mapped += end - p
    while p < end:
        to.mapped[p >> 3] |= <unsigned char>(1 << (p & 7))
        p += 1
    if _mapping_pause > 0:
        hv_sleep(_mapping_pause)        # (tests: asleep, as a slow mapping would be)
    return hv_now() - t0


def pages_mapped():
    """Pages of the peers' output arenas this process mapped before its first stores there
    (every context): for tests and docs."""
    return _pages_mapped


def _slow_mapping(double seconds):
    """Tests only: mapping a peer's output pages here for the first time takes `seconds`
    longer (asleep)."""
    global _mapping_pause
    _mapping_pause = seconds


cdef int _push(const Table* mine, const char* acc, const Table* t, OutMap* to, size_t a,
               size_t b, size_t hi, size_t es, iovec* loc, iovec* rem, bint stream,
               hv_prefetch* ahead, double* mapping) noexcept nogil:
    """The result for batch elements [a, b) into a peer's outputs: from acc (contiguous), or
    with acc NULL from this rank's own outputs. Where the peer's output lies in its arena
    (mapped here) this rank stores them itself (past the cache with `stream`, prefetching
    `ahead` meanwhile); elsewhere the kernel writes them."""
    cdef size_t i = _find(t.w, t.np, a), j = 0, n = 0, stop, length, x = a
    cdef uint64_t dst
    cdef const char* src
    cdef int err
    if acc == NULL:
        j = _find(mine.w, mine.np, a)
    while a < b and i < t.np:
        stop = <size_t>(t.w[i * PER] + t.w[i * PER + 1])
        if stop <= a:
            i += 1
            continue
        if acc == NULL:
            if j >= mine.np:
                break
            if <size_t>(mine.w[j * PER] + mine.w[j * PER + 1]) <= a:
                j += 1
                continue
            stop = min(stop, <size_t>(mine.w[j * PER] + mine.w[j * PER + 1]))
            src = <const char*>(<uint64_t>mine.w[j * PER + 3]) + (a - <size_t>mine.w[j * PER]) * es
        else:
            src = acc + (a - x) * es
        stop = min(stop, b)
        length = (stop - a) * es
        dst = <uint64_t>t.w[i * PER + 3] + (a - <size_t>t.w[i * PER]) * es
        if _push_to_for_tests:
            dst = _push_to_for_tests
        # inside the peer's arena, checked without a sum that can wrap (the address is read
        # from shared memory: near 2**64, dst + length came out small and passed)
        if (to.map != NULL and dst >= to.base and dst - to.base <= to.cap
                and length <= to.cap - (dst - to.base)):
            mapping[0] += _ready(to, dst - to.base, length, <size_t>(dst - to.base) + (
                min(<size_t>(t.w[i * PER] + t.w[i * PER + 1]), hi) - a) * es)
            if stream:
                hv_stream_copy_ahead(to.map + (dst - to.base), src, length, ahead)
            else:
                memcpy(to.map + (dst - to.base), src, length)
        else:
            loc[n].iov_base = <void*>src
            loc[n].iov_len = length
            rem[n].iov_base = <void*>dst
            rem[n].iov_len = length
            n += 1
            if n == NIOV:
                err = _move(t.pid, loc, n, rem, n, True)
                if err:
                    return err
                n = 0
        a = stop
    if a < b:
        return HV_ERR_SHM       # the tables do not cover the batch (they always do)
    return _move(t.pid, loc, n, rem, n, True) if n else 0


cdef bint _own_inplace(const int64_t* w, size_t np, size_t a, size_t b) noexcept nogil:
    """Whether every piece of this rank's holding [a, b) is reduced in place."""
    cdef size_t i = _find(w, np, a)
    while i < np and <size_t>w[i * PER] < b:
        if w[i * PER + 1] and w[i * PER + 2] != w[i * PER + 3]:
            return False
        i += 1
    return True


cdef void _reduce_into_own(const int64_t* w, size_t np, size_t a, size_t b, const char* src,
                           size_t es, int dtype, int op, bint first) noexcept nogil:
    """This rank's outputs for [a, b) op= src (the peer's elements, contiguous); `first`: the
    outputs take this rank's inputs (op) src instead, in one pass (the same buffer in place)."""
    cdef size_t i = _find(w, np, a), stop, take, at
    while a < b and i < np:
        stop = <size_t>(w[i * PER] + w[i * PER + 1])
        take = (stop if stop < b else b) - a
        if take:
            at = (a - <size_t>w[i * PER]) * es
            if first:
                reduce_to(<char*>(<uint64_t>w[i * PER + 3]) + at,
                          <const char*>(<uint64_t>w[i * PER + 2]) + at, src, take, dtype, op)
            else:
                reduce_into(<char*>(<uint64_t>w[i * PER + 3]) + at, src, take, dtype, op)
            src += take * es
            a += take
        i += 1


cdef void _fold_own(const int64_t* w, size_t np, size_t a, size_t b, char* acc,
                    const char* src, size_t es, int dtype, int op) noexcept nogil:
    """acc (elements [a, b), contiguous) takes this rank's inputs in one pass, without a copy of
    them first: acc op= inputs, or with `src` acc = inputs op src (the next rank's elements)."""
    cdef size_t i = _find(w, np, a), stop, take, at
    while a < b and i < np:
        stop = <size_t>(w[i * PER] + w[i * PER + 1])
        take = (stop if stop < b else b) - a
        if take:
            at = (a - <size_t>w[i * PER]) * es
            if src != NULL:
                reduce_to(acc, <const char*>(<uint64_t>w[i * PER + 2]) + at, src, take, dtype, op)
                src += take * es
            else:
                reduce_into(acc, <const char*>(<uint64_t>w[i * PER + 2]) + at, take, dtype, op)
            acc += take * es
            a += take
        i += 1


cdef void _divide_own(const int64_t* w, size_t np, size_t a, size_t b, size_t es, int dtype,
                      long divisor) noexcept nogil:
    """This rank's outputs for [a, b) divided by `divisor` (Average's last pass, while the
    chunk is still in the cache)."""
    cdef size_t i = _find(w, np, a), stop, take
    while a < b and i < np:
        stop = <size_t>(w[i * PER] + w[i * PER + 1])
        take = (stop if stop < b else b) - a
        if take:
            divide_by(<char*>(<uint64_t>w[i * PER + 3]) + (a - <size_t>w[i * PER]) * es, take,
                      dtype, divisor)
            a += take
        i += 1


cdef void _next_inputs(const int64_t* w, size_t np, size_t a, size_t b, size_t es,
                       hv_prefetch* ahead) noexcept nogil:
    """ahead: this rank's inputs for batch elements [a, b), as far as the piece holding a goes
    (all of them for one buffer; for a batch of small pieces the first only)."""
    cdef size_t i, stop
    ahead.left = 0
    if a >= b:
        return
    i = _find(w, np, a)
    stop = min(<size_t>(w[i * PER] + w[i * PER + 1]), b)
    if stop > a and w[i * PER + 2]:
        ahead.at = <const char*>(<uint64_t>w[i * PER + 2]) + (a - <size_t>w[i * PER]) * es
        ahead.left = (stop - a) * es


cdef void _scratch(ShmArea* a, Table** tables, iovec** loc, char** acc) noexcept nogil:
    """The call's tables, iovecs and two chunk buffers (NULL each, without memory): made at the
    area's first direct all-reduce, touched once, and kept until it closes. Allocated per call
    (144 KiB) they were now and then fresh pages: 0.3 page faults a call on one rank of an
    out-of-place 64 MiB loop on 2 ranks, none since."""
    cdef size_t bufs = 2 * CHUNK, iovs = 2 * NIOV * sizeof(iovec)
    cdef void* m = a.direct_scratch
    if m == NULL and posix_memalign(&m, 4096, bufs + iovs + a.L * sizeof(Table)) == 0:
        memset(m, 0, bufs + iovs + a.L * sizeof(Table))
        a.direct_scratch = m
    elif m == NULL:
        tables[0], loc[0], acc[0] = NULL, NULL, NULL
        return
    acc[0] = <char*>m
    loc[0] = <iovec*>(<char*>m + bufs)
    tables[0] = <Table*>(<char*>m + bufs + iovs)


cdef OutMap _NO_MAP
cdef int64_t _table_skew = 0    # tests: added to the first piece's count in this rank's table
cdef uint64_t _push_to_for_tests = 0    # tests: the address every push writes to (0: the table's)


def _push_to(uint64_t address):
    """Tests only: this rank writes every chunk it pushes to `address` in the peer (0: where
    the peer's table says), as a damaged address in the shared segment would send it."""
    global _push_to_for_tests
    _push_to_for_tests = address


def _skew_table(int64_t n):
    """Tests only: this rank publishes its direct all-reduce's table with the first piece's
    count off by n, as damaged shared memory would show it to the peers (0: as it is)."""
    global _table_skew
    _table_skew = n


cdef inline OutMap* _map(OutMap* maps, int r) noexcept nogil:
    return &maps[r] if maps != NULL else &_NO_MAP


cdef int shm_direct_allreduce(const ShmPiece* p, size_t np, size_t count, int dtype, int op,
                              ShmArea* a, OutMap* maps, long divisor) noexcept nogil:
    """Returns 0 when done, 1 when the caller must take the slot path (every rank returns the
    same), or an error code. maps: per node rank, its output arena mapped here (or NULL).
    divisor > 1: each chunk's result is divided before it goes out (a fused Average)."""
    cdef size_t es = dtype_size(dtype), k, lo, hi, at, n, step = CHUNK // es
    cdef int parity = (a.epoch + 1) & 1, r, err = 0, fallback = 0
    cdef int64_t* s = <int64_t*>shm_slot(a, a.me, parity)
    cdef Table* tables
    cdef iovec* loc
    cdef iovec* rem
    cdef char* acc
    cdef char* tmp
    cdef bint stream = count * es >= SHM_STREAM_MIN, first
    cdef double mapping = 0     # seconds spent mapping the peers' output pages here (_ready)
    cdef hv_prefetch ahead      # with `stream`: this rank's next inputs (else nothing)
    ahead.at, ahead.left = NULL, 0
    if count == 0:
        return 0
    if np > direct_max_pieces(a) or not direct_worth(a, count * es):
        return 1            # the same on every rank: the batch and the slot size are
    s[0] = <int64_t>getpid()
    s[1] = <int64_t>np
    s[2] = 0
    for k in range(np):
        s[HEAD + k * PER] = <int64_t>p[k].start
        s[HEAD + k * PER + 1] = <int64_t>p[k].count
        s[HEAD + k * PER + 2] = <int64_t>(<uint64_t>p[k].input)
        s[HEAD + k * PER + 3] = <int64_t>(<uint64_t>p[k].output)
        if p[k].count and (p[k].input == NULL or p[k].output == NULL):
            s[2] |= F_NULL
    s[HEAD + 1] += _table_skew      # (tests: 0)
    err = shm_barrier(a)
    if err:
        return err
    _scratch(a, &tables, &loc, &acc)
    for r in range(a.L):
        if tables != NULL:
            _table(a, r, parity, &tables[r])
        if (<const int64_t*>shm_slot(a, r, parity))[2] & F_NULL:
            fallback = 1
    if fallback:            # every rank saw the same tables
        return 1
    for r in range(a.L if tables != NULL else 0):
        if not _same_pieces(&tables[r], p, np):     # every rank reads the same words: the
            return HV_ERR_SHM_TABLE                 # same verdict everywhere
    if tables == NULL or loc == NULL or acc == NULL:
        err = HV_ERR_NOMEM      # still through every barrier, so no peer is left waiting
    rem = loc + NIOV if loc != NULL else NULL
    tmp = acc + CHUNK if acc != NULL else NULL
    lo = shm_slice_start(count, a.L, a.me, es)
    hi = shm_slice_start(count, a.L, a.me + 1, es)
    at = lo
    while err == 0 and at < hi:
        n = hi - at if hi - at < step else step
        if ((a.L == 2 or (a.L > 2 and a.me == 0))     # (one rank alone: its outputs need its inputs)
                and (not stream or _own_inplace(tables[a.me].w, np, at, at + n))):
            # reduce straight into this rank's own outputs (out of place, its inputs op the
            # first peer's in one pass): with two ranks x1 op x0 is x0 op x1 bit for bit (every
            # op here commutes), and rank 0's partial sums are in order; then out of them into
            # every peer's outputs. Out of place from SHM_STREAM_MIN the outputs are written
            # past the cache instead, through acc.
            first = True
            for r in range(a.L):
                if r != a.me and err == 0:
                    err = _peer_inputs(&tables[r], at, at + n, es, tmp, loc, rem)
                    if err == 0:
                        _reduce_into_own(tables[a.me].w, np, at, at + n, tmp, es, dtype, op, first)
                        first = False
            if divisor > 1 and err == 0:
                _divide_own(tables[a.me].w, np, at, at + n, es, dtype, divisor)
            for r in range(a.L):        # the result, still in the cache, to every peer
                if r != a.me and err == 0:
                    err = _push(&tables[a.me], NULL, &tables[r], _map(maps, r), at, at + n,
                                hi, es, loc, rem, stream, NULL, &mapping)
        else:
            # in rank order, this rank's inputs folded in where they come, not copied first
            # (a fifth of an out-of-place 64 MiB call on 2 ranks went to that copy)
            for r in range(a.L):
                if r == a.me:
                    if r:
                        _fold_own(tables[a.me].w, np, at, at + n, acc, NULL, es, dtype, op)
                    continue        # rank 0's: with rank 1's elements, below
                err = _peer_inputs(&tables[r], at, at + n, es, acc if r == 0 else tmp,
                                   loc, rem)
                if err:
                    break
                if r == 1 and a.me == 0:
                    _fold_own(tables[a.me].w, np, at, at + n, acc, tmp, es, dtype, op)
                elif r:
                    reduce_into(acc, tmp, n, dtype, op)
            if err == 0:
                if divisor > 1:
                    divide_by(acc, n, dtype, divisor)
                # while the stores wait on memory, this rank's inputs for the next chunk come
                # toward the cache (the addition would wait for them too)
                if stream:
                    _next_inputs(tables[a.me].w, np, at + n, min(hi, at + 2 * n), es, &ahead)
                shm_scatter(p, np, at, at + n, acc, dtype, stream, &ahead)
            for r in range(a.L):
                if r != a.me and err == 0:
                    err = _push(NULL, acc, &tables[r], _map(maps, r), at, at + n, hi, es, loc,
                                rem, stream, &ahead, &mapping)
        at += n
    # a peer's output pages mapped here for the first time: not the algorithm's time (trials)
    a.credit -= mapping
    # The last barrier: every peer's writes into this rank's outputs are done, and no rank
    # returns (letting its buffers go) while a peer still reaches into them. A failed write
    # left a peer's result wrong, so every rank fails, not only the one that saw it.
    return cma_agree(a, err)


# How many contexts use cross-memory attach, and whether this process opened itself to ptrace for
# them (Open MPI's rule: only where Yama's scope needs it), and to whom: one peer's pid where
# every context holding it has that one peer (two ranks on a node), else any process of the
# user (-1). Contexts come and go under the GIL.
cdef int _ptracer_holds = 0
cdef bint _ptracer_set = False
cdef long _ptracer_to = 0       # what was asked for (a pid, -1: any; 0: nothing)
cdef int _scope_for_tests = -2  # tests: Yama's scope as if read (-2: read it)


cdef int yama_scope() noexcept nogil:
    """Yama's ptrace scope (0 classic, 1 descendants only, 2 admin, 3 none), -1 without Yama."""
    cdef int v = -1
    cdef FILE* f = fopen(b"/proc/sys/kernel/yama/ptrace_scope", b"r")
    if f == NULL:
        return -1
    if fscanf(f, b"%d", &v) != 1:
        v = -1
    fclose(f)
    return v


cdef void ptracer_hold(bint allowed, long peer) noexcept nogil:
    global _ptracer_holds, _ptracer_set, _ptracer_to
    cdef long want = peer if peer > 0 else -1
    _ptracer_holds += 1
    # scope 1 lets only ancestors attach: the node's peers are siblings, so they need this; at
    # 0 they may already, at 2 and 3 it would not help
    if not allowed or (_scope_for_tests if _scope_for_tests != -2 else yama_scope()) != 1:
        return
    if _ptracer_to != 0 and _ptracer_to != want:
        want = -1               # another context's peer too: Yama keeps one tracer a process
    if want == _ptracer_to:
        return
    _ptracer_to = want
    _ptracer_set = prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY if want == -1 else <unsigned long>want,
                         0, 0, 0) == 0


cdef void ptracer_release() noexcept nogil:
    global _ptracer_holds, _ptracer_set, _ptracer_to
    if _ptracer_holds > 0:
        _ptracer_holds -= 1
    if _ptracer_holds == 0 and _ptracer_to != 0:
        if _ptracer_set:
            prctl(PR_SET_PTRACER, 0, 0, 0, 0)
        _ptracer_set = False
        _ptracer_to = 0


def ptracer_state():
    """(contexts holding, whether PR_SET_PTRACER is set, Yama's scope): for tests and docs."""
    return _ptracer_holds, bool(_ptracer_set), yama_scope()


def ptracer_target():
    """Whom this process asked Yama to let attach: a peer's pid, -1 any process of its user,
    0 nobody (also where Yama's scope needs nothing)."""
    return _ptracer_to


def _assume_yama_scope(int scope):
    """Tests only: act as if Yama's scope were `scope` (-2: read it again), so the choice of
    tracer is exercised where Yama is absent (prctl then fails, and ptracer_state says so)."""
    global _scope_for_tests
    _scope_for_tests = scope


cdef int direct_probe(ShmArea* a) noexcept nogil:
    """Collective over the node: 1 when this rank could read every peer's memory and write into
    it. The caller holds the ptracer (ptracer_hold) first: under Yama's scope 1 only ancestors
    may reach this process otherwise."""
    cdef int parity = (a.epoch + 1) & 1, r, ok = 1
    cdef int64_t* s = <int64_t*>shm_slot(a, a.me, parity)
    cdef const int64_t* t
    cdef int64_t magic = 0x68766C69 + a.me, got
    cdef int64_t* seen = <int64_t*>calloc(a.L, 8)     # each peer writes its magic at its rank
    cdef iovec loc, rem
    s[0] = <int64_t>getpid()
    s[1] = <int64_t>(<uint64_t>&magic)
    s[2] = <int64_t>(<uint64_t>seen)
    if shm_barrier(a):
        free(seen)
        return 0
    for r in range(a.L):
        t = <const int64_t*>shm_slot(a, r, parity)
        if r == a.me or t[2] == 0:
            ok = ok and t[2] != 0
            continue
        got = 0
        loc.iov_base = &got
        loc.iov_len = 8
        rem.iov_base = <void*>(<uint64_t>t[1])
        rem.iov_len = 8
        if process_vm_readv(<int>t[0], &loc, 1, &rem, 1, 0) != 8 or got != 0x68766C69 + r:
            ok = 0
        loc.iov_base = &magic
        rem.iov_base = <void*>(<uint64_t>t[2] + 8 * <uint64_t>a.me)
        if process_vm_writev(<int>t[0], &loc, 1, &rem, 1, 0) != 8:
            ok = 0
    if shm_barrier(a):      # nobody's `magic` or `seen` goes while a peer reaches it
        free(seen)
        return 0
    for r in range(a.L):
        if seen == NULL or (r != a.me and seen[r] != 0x68766C69 + r):
            ok = 0
    free(seen)
    return ok
