"""auto's choice, measured. The cost model ranks the algorithms from a few probes; on a busy
or oversubscribed node its figures drift (4 ranks on 2 cores: it took shm at 16 MiB where ring
ran 1.26x faster). So the first auto all-reduce of each size class times the algorithms the
model puts near its best, on a scratch buffer of that size, and the class keeps the fastest.

Every rank times the same candidates the same number of times (set by the model's
predictions, which all ranks share), each run from a common start and the candidates in turn,
as calls come in a job (back to back, one algorithm's buffers stay in cache and ranks that
finish early start the next run sooner: shm at 1 MiB on 2 ranks measured 190 us that way and
370 us between other calls), then the slowest rank's time of each block is agreed with one
all-reduce (MAX), so every rank computes the same pick. Three blocks, interleaved
across candidates so a burst of load hits them alike; the median block decides, and among the
candidates within 10% of the fastest, the one the model ranks first.
"""
from libc.stdlib cimport free
from libc.string cimport memset
from libc.stdio cimport fprintf, stderr
from mpi4py.libmpi cimport *
from hvlite._core.codes cimport DT_FLOAT64, OP_MAX, HV_ERR_NOMEM, HV_ALGORITHM_NAMES, ALG_SHM
from hvlite._core.rd cimport rd_allreduce
from hvlite._core.p2p cimport comm_rank

cdef extern from "stdlib.h" nogil:
    void* aligned_alloc(size_t alignment, size_t size)
cdef extern from "sys/mman.h" nogil:
    int madvise(void* addr, size_t length, int advice)
    int MADV_HUGEPAGE
cdef extern from "sync.h" nogil:
    double hv_now()

cdef enum:
    BLOCKS = 3
    MAX_REPS = 16
    HUGE = 2 << 20
    OFFSET = 16          # where malloc puts a large block's data in its pages, as NumPy's

cdef double BLOCK_SECONDS = 1e-3     # repetitions per block: about this long by the model
# Within this factor of the fastest a candidate counts as tied, and the model's order decides:
# identical columns of one benchmark run differ by 5-10% here, and at 2 ranks and 1 MiB the
# calibration measured rhd 3-8% ahead of ring where calls through the public path ran ring
# 13-15% faster (the model's tie rule puts ring first).
cdef double TIE = 1.10


cdef int size_class(size_t nbytes) noexcept nogil:
    cdef int k = 0
    while k < 62 and (<size_t>1 << (k + 1)) <= nbytes:
        k += 1
    if k < CAL_LOW:
        k = CAL_LOW
    if k > CAL_HIGH:
        k = CAL_HIGH
    return k - CAL_LOW


cdef int _sync(MPI_Comm comm, Scratch* s) noexcept nogil:
    """Every rank has arrived (an 8-byte all-reduce through the core's own waits, so a lost
    rank ends it like any collective)."""
    cdef double x = 0.0
    return rd_allreduce(<char*>&x, 1, DT_FLOAT64, OP_MAX, comm, s)


cdef int calibrate_class(Calibration* cal, size_t nbytes, const int* candidates,
                         const double* predicted, int ncand, void* ctx, cal_run_fn run,
                         MPI_Comm comm, Scratch* s) noexcept nogil:
    cdef int cls = size_class(nbytes), i, b, r, err = 0, best = 0
    cdef int reps[CAL_MAX_CANDIDATES]
    cdef double t[BLOCKS * CAL_MAX_CANDIDATES]
    cdef double med[CAL_MAX_CANDIDATES]
    cdef double x, y, z, t0, fastest
    cdef size_t count
    cdef char* buf
    cdef char* base
    if ncand > CAL_MAX_CANDIDATES:
        ncand = CAL_MAX_CANDIDATES
    if nbytes > (<size_t>1 << CAL_HIGH):
        nbytes = <size_t>1 << CAL_HIGH
    count = nbytes // 4 if nbytes >= 4 else 1
    # Like NumPy's own large arrays (the buffers auto will run on): on huge pages where the
    # kernel gives them on request. Measured at 4 ranks, 16 MiB: ring 23 ms on small pages
    # against 15-19 ms on a NumPy array, which turned the pick from ring to shm.
    base = <char*>aligned_alloc(HUGE, (count * 4 + OFFSET + HUGE - 1) // HUGE * HUGE)
    buf = base + OFFSET
    if base == NULL:
        return HV_ERR_NOMEM
    if count * 4 >= 4 * HUGE:
        madvise(base, (count * 4 + OFFSET + HUGE - 1) // HUGE * HUGE, MADV_HUGEPAGE)
    memset(buf, 0, count * 4)
    for i in range(ncand):
        r = <int>(BLOCK_SECONDS / predicted[i]) if predicted[i] > 0 else MAX_REPS
        reps[i] = 1 if r < 1 else (MAX_REPS if r > MAX_REPS else r)
    for i in range(ncand):              # page in, connect, warm the segment
        if err == 0:
            err = run(ctx, buf, count, candidates[i])
    for b in range(BLOCKS):
        for i in range(ncand):
            t[b * ncand + i] = 0
        for r in range(MAX_REPS):
            for i in range(ncand):      # candidates in turn, each run from a common start
                if err or r >= reps[i]:
                    continue
                err = _sync(comm, s)
                t0 = hv_now()
                if err == 0:
                    err = run(ctx, buf, count, candidates[i])
                t[b * ncand + i] += (hv_now() - t0) / reps[i]
    free(base)
    if err == 0:
        err = rd_allreduce(<char*>t, BLOCKS * ncand, DT_FLOAT64, OP_MAX, comm, s)
    if err:
        return err
    for i in range(ncand):              # the median of three
        x, y, z = t[i], t[ncand + i], t[2 * ncand + i]
        med[i] = x if (y <= x <= z or z <= x <= y) else (y if (x <= y <= z or z <= y <= x) else z)
        cal.seconds[cls][candidates[i]] = med[i]
        if med[i] < med[best]:
            best = i
    fastest = med[best]
    best = -1
    for i in range(ncand):              # near the fastest, the model's order decides (ties: the
        if med[i] <= TIE * fastest and (best < 0 or predicted[i] < predicted[best]):
            best = i                    # earlier candidate, as in cost_model.choose)
    cal.pick[cls] = <signed char>candidates[best]
    cal.at_bytes[cls] = <double>nbytes
    if cal.verbose and comm_rank(comm) == 0:
        fprintf(stderr, b"hvlite: auto measured at %.0f bytes:", <double>nbytes)
        for i in range(ncand):
            fprintf(stderr, b" %s%s %.1f us%s", HV_ALGORITHM_NAMES[candidates[i]],
                    b" (hierarchical over shm)" if candidates[i] == ALG_SHM and cal.nodes > 1 else b"",
                    med[i] * 1e6, b"," if i + 1 < ncand else b"")
        fprintf(stderr, b" -> %s\n", HV_ALGORITHM_NAMES[candidates[best]])
    return 0
