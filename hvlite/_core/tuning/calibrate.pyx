"""auto's choice, measured on the job's own calls. The cost model ranks the algorithms from a
few probes; on a busy or oversubscribed node its figures drift (4 ranks on 2 cores: it took shm
at 16 MiB where ring ran 1.26x faster). So the model only proposes: the first calls of each size
class (powers of two) try the algorithms it predicts within 2.5x of its best (1.4x across
nodes, dispatch.CROSS_SPREAD), and the class keeps the fastest, confirmed on later calls.

The trials are the job's real calls, on its buffers, between its other work: timing the same
algorithms on a scratch buffer back to back at the first call measured other things (shm at
1 MiB on 2 ranks 190 us there against 370 us between other calls; rhd 25% ahead of ring there
and 14% behind it in calls). Every algorithm gives the same result up to the order of float
additions, and within a call the same bits on every rank.

Every rank resolves the same calls in the same order, so they try the same candidate on the
same call; after each trial the slowest rank's time is agreed with an 8-byte all-reduce (MAX),
so every rank records the same times and picks alike.

- Two passes run each candidate twice; those whose better call is over CUT x the fastest's
  are dropped (across hosts rd and tree at megabytes cost 2-4x the best, and three calls of
  each were most of a short job's trials); the others run CAL_TRIALS calls in all and the
  median counts (the first may
  pay a connection or a page fault; with two and the faster, a lucky call of rhd beat shm at
  256 KiB on 4 ranks where shm runs 1.5x faster). Among the candidates within TIE of the
  fastest the model's order decides.
- No trial runs in a round that went through rank 0 (a name's first calls, a miss): its ranks
  leave the gather and broadcast out of step, and an algorithm whose waits sleep (the shared
  segment's barrier) paid for the skew that MPI's spinning progress hid: shm's trials at 64 KiB
  took 30-40 us there against 6 us in the job's later calls, and auto kept rd or rhd at 1.6-1.7x
  the best in two launches of three. The flag is agreed (the round's bits), so every rank skips
  alike; such a call runs the model's choice.
- Across nodes a call costs milliseconds and a slow candidate's trials whole training steps
  (rd at 3 MB on 2 hosts of 2 ranks at 1 Gbit/s: 55 ms against shm's 23), while fused batches
  spread a job's calls over several classes. So there a class tries only what did not lose by
  over NEAR x the pick in the nearest measured class a factor of 2 or 4 away, and that pick;
  a lone survivor is taken without trials. Algorithms' costs move smoothly with size: a 1.5x
  gap does not close within a factor of 4. One node keeps every candidate (trials cost
  microseconds there), and tries at least two: beside a lone one, those the model puts within
  8x of it or under 0.5 ms a call, else its runner-up (dispatch.resolve_algorithm), so a model
  probed at a busy moment is checked too.
- The pick is confirmed on the job's calls: windows of CAL_WINDOW calls, timed and agreed in
  one all-reduce, right after the pick and then at doubling gaps (at most CAL_GAP_MAX calls
  apart). A window whose median departs from the pick's trial time by more than DRIFT either
  way says the trials measured another machine (a busy one, or one busy then) and the class is
  measured again, at most CAL_REDOS times.
- A window can confirm a pick whose trials were right about it and wrong about the others: on
  this 2-vCPU machine, in a state where every shared-memory path slows down, shm won its trials
  at 64 KiB and then ran 1.4x slower than ring for the rest of the launch, at its trial time.
  So after a confirmed window the runner-up (the fastest other candidate by its last time) runs
  a warm-up call and CAL_TRIALS timed calls, if what those cost over the pick's calls is within
  CHALLENGE_COST of the calls since the last window: a runner-up at 1.1x the pick's time after
  16 calls, at 2x after 256, at 8x after 1024, slower never. If their median beats the pick's
  window by SWITCH (or the class's bar, if higher) it becomes the pick, and the old pick the
  runner-up.
"""
from libc.stdio cimport fprintf, snprintf, stderr
from mpi4py.libmpi cimport *
from hvlite._core.codes cimport DT_FLOAT64, OP_MAX, HV_ALGORITHM_NAMES, ALG_SHM
from hvlite._core.algorithms.rd cimport rd_allreduce
from hvlite._core.algorithms.p2p cimport comm_rank

cdef extern from "sync.h" nogil:
    double hv_now()

cdef double TIE = 1.05      # within this of the fastest, the model's order decides
cdef double CUT = 2.0       # slower than this x the fastest in the first pass: dropped
cdef double DRIFT = 1.5     # a confirming window this far from the trials: measure again
cdef double NEAR = 1.5      # across nodes: slower than this x the pick a class or two away: not tried
cdef double SWITCH = 1.1    # a challenger this much faster than the pick's window takes its place
# A call's fixed cost in bytes of its bandwidth: one node ~2 us against ~60 us a MiB (35 KB),
# across hosts at 1 Gbit/s ~60 us against 8 ms a MiB (8 KB)
cdef double LATENCY_BYTES = 32768
cdef double CHALLENGE_COST = 0.03   # a challenge's extra time, at most this of the calls since the last


cdef void cal_init(Calibration* cal, bint enabled, bint verbose, int nodes) noexcept nogil:
    cdef int i, a
    cal.enabled, cal.verbose, cal.nodes = enabled, verbose, nodes
    cal.names, cal.who, cal.apart_text = HV_ALGORITHM_NAMES, b"auto", b" out of place"
    cal.untimed = False
    cal.scale = 1
    cal.scale_only = -1
    cal.warm = False
    cal.armed = 0
    for i in range(CAL_SLOTS):
        cal.pick[i] = -1
        cal.bar[i] = TIE
        cal.ncand[i] = 0
        cal.trials[i] = 0
        cal.redos[i] = 0
        cal.confirmed[i] = 0
        cal.challenger[i] = -1
        cal.challenges[i] = 0
        cal.switches[i] = 0
        cal.warmed[i] = False
        cal.in_window[i] = 0
        cal.wait[i] = 0
        cal.gap[i] = CAL_WINDOW
        for a in range(ALG_COUNT):
            cal.seconds[i][a] = 0


cdef int size_class(size_t nbytes, bint apart=False) noexcept nogil:
    cdef int k = 0
    while k < 62 and (<size_t>1 << (k + 1)) <= nbytes:
        k += 1
    if k < CAL_LOW:
        k = CAL_LOW
    if k > CAL_HIGH:
        k = CAL_HIGH
    return k - CAL_LOW + (CAL_CLASSES if apart else 0)


cdef int cal_neighbour(const Calibration* cal, int cls) noexcept nogil:
    cdef int base = cls - cls % CAL_CLASSES, d, j, k
    for d in range(1, 3):
        for j in range(2):
            k = cls - d if j == 0 else cls + d
            if base <= k < base + CAL_CLASSES and cal.pick[k] >= 0:
                return k
    return -1


cdef bint cal_lost(const Calibration* cal, int cls, int algo) noexcept nogil:
    cdef double mine = cal.seconds[cls][algo], won = cal.seconds[cls][cal.pick[cls]]
    return mine > 0 and won > 0 and mine > NEAR * won


cdef void cal_begin(Calibration* cal, int cls, size_t nbytes, const int* candidates,
                    const double* predicted, int n) noexcept nogil:
    cdef int i, a
    if n > CAL_MAX_CANDIDATES:
        n = CAL_MAX_CANDIDATES
    for i in range(n):
        cal.cand[cls][i] = candidates[i]
        cal.pred[cls][i] = predicted[i]
        cal.ntrial[cls][i] = 0
        cal.dropped[cls][i] = False
    for a in range(ALG_COUNT):
        cal.seconds[cls][a] = 0
    cal.ncand[cls] = n
    cal.challenger[cls] = -1
    cal.bar[cls] = TIE
    cal.trials[cls] = 0
    cal.warmed[cls] = False
    cal.at_bytes[cls] = <double>nbytes


cdef int cal_next(Calibration* cal, int cls, size_t nbytes) noexcept nogil:
    """The candidate still in that has run the fewest trials (the first such in the candidates'
    order): two passes over all, then the survivors in turn. With `warm`, every other call is
    the next trial's candidate untimed: a call right after another candidate's pays for the
    lines that one left dirty in the other cores' caches (the segment's ways at 1 MiB on 2
    ranks: 96-106 us through the slots right after a direct call, 48-55 us in the job's calls)."""
    cdef int k = -1, i
    for i in range(cal.ncand[cls]):
        if not cal.dropped[cls][i] and (k < 0 or cal.ntrial[cls][i] < cal.ntrial[cls][k]):
            k = i
    if cal.warm and not cal.warmed[cls]:
        cal.warmed[cls] = True
        return cal.cand[cls][k]
    cal.warmed[cls] = False
    cal.armed, cal.armed_k, cal.armed_bytes = cls + 1, k, <double>nbytes
    cal.t0 = hv_now()
    return cal.cand[cls][k]


cdef int cal_kept(Calibration* cal, int cls, size_t nbytes) noexcept nogil:
    cdef int k = cal.challenger[cls]
    if k >= 0 and cal.untimed:      # the pick runs: the challenger warms up again after it
        cal.warmed[cls] = False
    if cal.ncand[cls] > 1 and not cal.untimed:    # a lone candidate had no trials to confirm
        if k >= 0:          # a warm-up call, then CAL_TRIALS timed ones (cal_done ends it)
            if cal.warmed[cls]:
                cal.armed, cal.armed_k, cal.armed_bytes = cls + 1, -2, <double>nbytes
                cal.t0 = hv_now()
            cal.warmed[cls] = True
            return cal.cand[cls][k]
        if cal.wait[cls] > 0:
            cal.wait[cls] -= 1
        else:
            cal.armed, cal.armed_k, cal.armed_bytes = cls + 1, -1, <double>nbytes
            cal.t0 = hv_now()
    return cal.pick[cls]


cdef bint cal_may_time(const Calibration* cal, int cls) noexcept nogil:
    """As cal_next and cal_kept decide: every call of a class in its trials may be timed; one
    with a pick only while a challenger runs or once the wait for its next window is over."""
    if not cal.enabled:
        return False
    if cal.pick[cls] < 0:
        return True
    return cal.ncand[cls] > 1 and (cal.challenger[cls] >= 0 or cal.wait[cls] == 0)


cdef void cal_credit(Calibration* cal, double seconds) noexcept nogil:
    if cal.armed:
        cal.t0 -= seconds


cdef double as_at(double at, double nbytes) noexcept nogil:
    """What a call of nbytes takes at `at` bytes, for a time per call of LATENCY_BYTES + bytes:
    a class's calls vary in size (2x within one; the top class has no bound: 64 MiB calls held
    to 16 MiB trials read 4x slower, were measured again and mixed sizes in their trials)."""
    return (LATENCY_BYTES + at) / (LATENCY_BYTES + nbytes)


cdef double _median3(const double* t) noexcept nogil:
    if (t[1] <= t[0] <= t[2]) or (t[2] <= t[0] <= t[1]):
        return t[0]
    if (t[0] <= t[1] <= t[2]) or (t[2] <= t[1] <= t[0]):
        return t[1]
    return t[2]


cdef double _median(double* t, int n) noexcept nogil:
    """In place (insertion sort: n is a window)."""
    cdef int i, j
    cdef double v
    for i in range(1, n):
        v = t[i]
        j = i - 1
        while j >= 0 and t[j] > v:
            t[j + 1] = t[j]
            j -= 1
        t[j + 1] = v
    return t[n // 2] if n % 2 else 0.5 * (t[n // 2 - 1] + t[n // 2])


cdef void _decide(Calibration* cal, int cls, MPI_Comm comm) noexcept nogil:
    cdef int n = cal.ncand[cls], i, best = -1, used
    cdef double fastest
    cdef const int* cand = cal.cand[cls]
    cdef char line[1024]        # 8 candidates of < 80 characters
    for i in range(n):
        if not cal.dropped[cls][i] and (best < 0 or
                                        cal.seconds[cls][cand[i]] < cal.seconds[cls][cand[best]]):
            best = i
    fastest = cal.seconds[cls][cand[best]]
    best = -1
    for i in range(n):      # near the fastest, the model's order (ties: the earlier candidate)
        if (not cal.dropped[cls][i] and cal.seconds[cls][cand[i]] <= cal.bar[cls] * fastest
                and (best < 0 or cal.pred[cls][i] < cal.pred[cls][best])):
            best = i
    cal.pick[cls] = <signed char>cand[best]
    cal.confirmed[cls] = 0
    cal.in_window[cls] = 0
    cal.wait[cls] = 0              # the first window opens at once
    cal.gap[cls] = CAL_WINDOW
    if cal.verbose and comm_rank(comm) == 0:       # one write: a launcher labels each write
        used = snprintf(line, sizeof(line), b"hvlite: %s measured at %.0f bytes%s:", cal.who,
                        cal.at_bytes[cls], cal.apart_text if cls >= CAL_CLASSES else <const char*>b"")
        for i in range(n):
            used += snprintf(line + used, sizeof(line) - used, b" %s%s %.1f us%s%s",
                             cal.names[cand[i]],
                             b" (hierarchical over shm)" if cand[i] == ALG_SHM and cal.nodes > 1
                             else b"", cal.seconds[cls][cand[i]] * 1e6,
                             b" (two calls, dropped)" if cal.dropped[cls][i] else b"",
                             b"," if i + 1 < n else b"")
        fprintf(stderr, b"%s -> %s\n", line, cal.names[cand[best]])


cdef inline double _better2(const double* t) noexcept nogil:
    return t[0] if t[0] < t[1] else t[1]


cdef void _first_passes_done(Calibration* cal, int cls) noexcept nogil:
    """Drop the candidates whose better call of two is over CUT x the fastest's (one call is
    not enough: the first timed call of a class, ring's in the model's order, ran 3-4x its
    later calls on 2 ranks)."""
    cdef int i
    cdef double fastest = -1
    for i in range(cal.ncand[cls]):
        if fastest < 0 or _better2(cal.trial[cls][i]) < fastest:
            fastest = _better2(cal.trial[cls][i])
    for i in range(cal.ncand[cls]):
        if _better2(cal.trial[cls][i]) > CUT * fastest:
            cal.dropped[cls][i] = True
            cal.seconds[cls][cal.cand[cls][i]] = _better2(cal.trial[cls][i])


cdef int _trial_done(Calibration* cal, int cls, int k, double t, MPI_Comm comm,
                     Scratch* s) noexcept nogil:
    cdef int err, i, more = 0
    err = rd_allreduce(<char*>&t, 1, DT_FLOAT64, OP_MAX, comm, s)
    if err:
        return err
    cal.trial[cls][k][cal.ntrial[cls][k]] = t
    cal.ntrial[cls][k] += 1
    cal.trials[cls] += 1
    if cal.trials[cls] == 2 * cal.ncand[cls]:
        _first_passes_done(cal, cls)
    if cal.trials[cls] < 2 * cal.ncand[cls]:
        return 0
    for i in range(cal.ncand[cls]):
        if not cal.dropped[cls][i]:
            more += cal.ntrial[cls][i] < CAL_TRIALS
    if more:        # a lone survivor too: its median is what its confirmations are held to
        return 0
    for i in range(cal.ncand[cls]):     # the survivors' medians
        if not cal.dropped[cls][i]:
            cal.seconds[cls][cal.cand[cls][i]] = _median3(cal.trial[cls][i])
    _decide(cal, cls, comm)
    return 0


cdef int _window_done(Calibration* cal, int cls, MPI_Comm comm, Scratch* s) noexcept nogil:
    cdef int err
    cdef double got, trial
    cal.in_window[cls] = 0          # first: a failed agreement must not leave the window full
    err = rd_allreduce(<char*>cal.window[cls], CAL_WINDOW, DT_FLOAT64, OP_MAX, comm, s)
    if err:
        return err
    got = _median(cal.window[cls], CAL_WINDOW)
    trial = cal.seconds[cls][cal.pick[cls]]
    cal.confirmed[cls] = got
    if (got > DRIFT * trial or got * DRIFT < trial) and cal.redos[cls] < CAL_REDOS:
        if cal.verbose and comm_rank(comm) == 0:
            fprintf(stderr, b"hvlite: %s's pick at %.0f bytes%s, %s, ran %.1f us in the job's "
                    b"calls against %.1f us in its trials: measuring again\n", cal.who,
                    cal.at_bytes[cls], cal.apart_text if cls >= CAL_CLASSES else <const char*>b"",
                    cal.names[cal.pick[cls]], got * 1e6, trial * 1e6)
        cal.redos[cls] += 1
        cal.pick[cls] = -1
        cal.ncand[cls] = 0      # dispatch begins the trials again
        return 0
    _challenge(cal, cls)
    cal.gap[cls] = cal.gap[cls] * 2 if cal.gap[cls] * 2 < CAL_GAP_MAX else CAL_GAP_MAX
    cal.wait[cls] = cal.gap[cls]
    return 0


cdef void _challenge(Calibration* cal, int cls) noexcept nogil:
    """The runner-up (the fastest other candidate by its last measured time) runs next if its
    calls, at that time, cost at most CHALLENGE_COST of the calls since the last window more
    than the pick's would."""
    cdef int i, k = -1
    cdef double t, best = 0
    for i in range(cal.ncand[cls]):
        t = cal.seconds[cls][cal.cand[cls][i]]
        if cal.cand[cls][i] != cal.pick[cls] and t > 0 and (k < 0 or t < best):
            k, best = i, t
    if k >= 0 and (CAL_TRIALS + 1) * (best - cal.confirmed[cls]) <= (
            CHALLENGE_COST * cal.gap[cls] * cal.confirmed[cls]):
        cal.challenger[cls] = k
        cal.warmed[cls] = False


cdef int _challenge_done(Calibration* cal, int cls, MPI_Comm comm, Scratch* s) noexcept nogil:
    cdef int err, k = cal.challenger[cls], old = cal.pick[cls]
    cdef double got, held = cal.confirmed[cls]
    cdef double bar = cal.bar[cls] if cal.bar[cls] > SWITCH else SWITCH
    cal.in_window[cls] = 0          # first: a failed agreement must leave no challenge open
    cal.challenger[cls] = -1
    cal.warmed[cls] = False
    err = rd_allreduce(<char*>cal.window[cls], CAL_TRIALS, DT_FLOAT64, OP_MAX, comm, s)
    if err:
        return err
    got = _median(cal.window[cls], CAL_TRIALS)
    cal.challenges[cls] += 1
    cal.seconds[cls][cal.cand[cls][k]] = got
    if got * bar >= held:
        return 0
    if cal.verbose and comm_rank(comm) == 0:
        fprintf(stderr, b"hvlite: %s at %.0f bytes%s: %s ran %.1f us in the job's calls, its pick "
                b"%s %.1f us: %s from now\n", cal.who, cal.at_bytes[cls],
                cal.apart_text if cls >= CAL_CLASSES else <const char*>b"",
                cal.names[cal.cand[cls][k]], got * 1e6, cal.names[old], held * 1e6,
                cal.names[cal.cand[cls][k]])
    cal.seconds[cls][old] = held
    cal.pick[cls] = <signed char>cal.cand[cls][k]
    cal.switches[cls] += 1
    cal.confirmed[cls] = 0
    cal.wait[cls] = 0              # the new pick's first window opens at once
    cal.gap[cls] = CAL_WINDOW
    return 0


cdef int cal_done(Calibration* cal, MPI_Comm comm, Scratch* s) noexcept nogil:
    cdef int cls = cal.armed - 1, k = cal.armed_k, ran
    cdef double t
    if cal.armed == 0:
        return 0
    t = hv_now() - cal.t0
    cal.armed = 0
    ran = cal.cand[cls][k] if k >= 0 else (
        cal.cand[cls][cal.challenger[cls]] if k == -2 else cal.pick[cls])
    if cal.scale_only < 0 or ran == cal.scale_only:
        t *= cal.scale
    t *= as_at(cal.at_bytes[cls], cal.armed_bytes)
    if k >= 0:
        return _trial_done(cal, cls, k, t, comm, s)
    cal.window[cls][cal.in_window[cls]] = t
    cal.in_window[cls] += 1
    if k == -2:
        return _challenge_done(cal, cls, comm, s) if cal.in_window[cls] == CAL_TRIALS else 0
    if cal.in_window[cls] < CAL_WINDOW:
        return 0
    return _window_done(cal, cls, comm, s)
