"""auto's choice, measured on the job's own calls. The cost model ranks the algorithms from a
few probes; on a busy or oversubscribed node its figures drift (4 ranks on 2 cores: it took shm
at 16 MiB where ring ran 1.26x faster). So the model only proposes: the first calls of each size
class (powers of two) run, in turn, the algorithms it predicts within 2.5x of its best, three
times each, and the class keeps the fastest for good.

The trials are the job's real calls, on its buffers, between its other work: timing the same
algorithms on a scratch buffer back to back at the first call measured other things (shm at
1 MiB on 2 ranks 190 us there against 370 us between other calls; rhd 25% ahead of ring there
and 14% behind it in calls). Every algorithm gives the same result up to the order of float
additions, and within a call the same bits on every rank.

Every rank resolves the same calls in the same order, so they try the same candidate on the
same call; after each trial the slowest rank's time is agreed with an 8-byte all-reduce (MAX),
so every rank records the same times and picks alike. A candidate's time is the median of its
three calls (the first may pay a connection or a page fault; with two and the faster, a lucky
call of rhd beat shm at 256 KiB on 4 ranks where shm runs 1.5x faster), and among the
candidates within 10% of the fastest the model's order decides (identical columns of one
benchmark run differ by 5-10% here).
"""
from libc.stdio cimport fprintf, stderr
from mpi4py.libmpi cimport *
from hvlite._core.codes cimport DT_FLOAT64, OP_MAX, HV_ALGORITHM_NAMES, ALG_SHM
from hvlite._core.algorithms.rd cimport rd_allreduce
from hvlite._core.algorithms.p2p cimport comm_rank

cdef extern from "sync.h" nogil:
    double hv_now()

cdef double TIE = 1.10


cdef int size_class(size_t nbytes, bint apart=False) noexcept nogil:
    cdef int k = 0
    while k < 62 and (<size_t>1 << (k + 1)) <= nbytes:
        k += 1
    if k < CAL_LOW:
        k = CAL_LOW
    if k > CAL_HIGH:
        k = CAL_HIGH
    return k - CAL_LOW + (CAL_CLASSES if apart else 0)


cdef void cal_begin(Calibration* cal, int cls, size_t nbytes, const int* candidates,
                    const double* predicted, int n) noexcept nogil:
    cdef int i
    if n > CAL_MAX_CANDIDATES:
        n = CAL_MAX_CANDIDATES
    for i in range(n):
        cal.cand[cls][i] = candidates[i]
        cal.pred[cls][i] = predicted[i]
    cal.ncand[cls] = n
    cal.trials[cls] = 0
    cal.at_bytes[cls] = <double>nbytes


cdef int cal_next(Calibration* cal, int cls) noexcept nogil:
    cdef int k = cal.trials[cls] % cal.ncand[cls]
    cal.armed, cal.armed_k = cls + 1, k
    cal.t0 = hv_now()
    return cal.cand[cls][k]


cdef double _median3(const double* t) noexcept nogil:
    if (t[1] <= t[0] <= t[2]) or (t[2] <= t[0] <= t[1]):
        return t[0]
    if (t[0] <= t[1] <= t[2]) or (t[2] <= t[1] <= t[0]):
        return t[1]
    return t[2]


cdef void _decide(Calibration* cal, int cls, MPI_Comm comm) noexcept nogil:
    cdef int n = cal.ncand[cls], i, best = 0
    cdef double fastest
    cdef const int* cand = cal.cand[cls]
    for i in range(n):
        if cal.seconds[cls][cand[i]] < cal.seconds[cls][cand[best]]:
            best = i
    fastest = cal.seconds[cls][cand[best]]
    best = -1
    for i in range(n):      # near the fastest, the model's order (ties: the earlier candidate)
        if cal.seconds[cls][cand[i]] <= TIE * fastest and (best < 0 or cal.pred[cls][i] < cal.pred[cls][best]):
            best = i
    cal.pick[cls] = <signed char>cand[best]
    if cal.verbose and comm_rank(comm) == 0:
        fprintf(stderr, b"hvlite: auto measured at %.0f bytes%s:", cal.at_bytes[cls],
                b" out of place" if cls >= CAL_CLASSES else b"")
        for i in range(n):
            fprintf(stderr, b" %s%s %.1f us%s", HV_ALGORITHM_NAMES[cand[i]],
                    b" (hierarchical over shm)" if cand[i] == ALG_SHM and cal.nodes > 1 else b"",
                    cal.seconds[cls][cand[i]] * 1e6, b"," if i + 1 < n else b"")
        fprintf(stderr, b" -> %s\n", HV_ALGORITHM_NAMES[cand[best]])


cdef int cal_done(Calibration* cal, MPI_Comm comm, Scratch* s) noexcept nogil:
    cdef int cls = cal.armed - 1, err, k
    cdef double t
    if cal.armed == 0:
        return 0
    t = hv_now() - cal.t0
    cal.armed = 0
    err = rd_allreduce(<char*>&t, 1, DT_FLOAT64, OP_MAX, comm, s)
    if err:
        return err
    cal.trial[cls][cal.armed_k][cal.trials[cls] // cal.ncand[cls]] = t
    cal.trials[cls] += 1
    if cal.trials[cls] >= CAL_TRIALS * cal.ncand[cls]:
        for k in range(cal.ncand[cls]):
            cal.seconds[cls][cal.cand[cls][k]] = _median3(cal.trial[cls][k])
        _decide(cal, cls, comm)
    return 0
