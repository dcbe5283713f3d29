from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.codes cimport ALG_COUNT
from hvlite._core.algorithms.algorithm cimport Scratch

# Size classes: powers of two from 1 KiB (everything smaller too) to 256 MiB (everything larger),
# once for calls in place and once for outputs apart from their inputs (CAL_CLASSES on): the
# algorithms rank differently (on one node out of place costs the shared-memory path one more
# pass over memory; ring and rhd read the input as they go). Above 16 MiB too: on 2 ranks 16 MiB
# buffers still fit the last-level cache and 64 MiB do not, and the segment's ways swapped there.
cdef enum:
    CAL_LOW = 10
    CAL_HIGH = 28
    CAL_CLASSES = CAL_HIGH - CAL_LOW + 1
    CAL_SLOTS = 2 * CAL_CLASSES
    CAL_MAX_CANDIDATES = 8
    CAL_TRIALS = 3           # calls per candidate that survives the first pass; the median counts
    CAL_WINDOW = 8           # calls of a kept pick timed together to confirm it
    CAL_GAP_MAX = 1024       # at most this many calls between two confirmations
    CAL_REDOS = 3            # a class is measured again at most this many times

# What auto measured: per size class the candidates, their trial times (the slowest rank's),
# the pick (-1: still trying) and what confirms it.
cdef struct Calibration:
    bint enabled
    # What rank 0 prints: the candidates' names (HV_ALGORITHM_NAMES, or HV_SHM_WAY_NAMES where
    # the candidates are the shared segment's ways), who measured, and what the upper classes are.
    const char* const* names
    const char* who
    const char* apart_text
    bint verbose         # rank 0 prints each class's figures (HVLITE_LOG_LEVEL=debug)
    int nodes            # for the names it prints: shm across nodes is hierarchical over shm
    bint untimed         # this round's ranks arrived out of step (it went through rank 0): no timing
    double scale         # timed calls record scale x their time (1; tests disturb them)
    int scale_only       # ... only the calls of this candidate (-1: of every candidate)
    bint warm            # each trial call follows an untimed call of the same candidate
    bint warmed[CAL_SLOTS]                        # the class's last call was that warm-up
    signed char pick[CAL_SLOTS]
    double at_bytes[CAL_SLOTS]
    double seconds[CAL_SLOTS][ALG_COUNT]         # each candidate's median trial; 0: none
    double trial[CAL_SLOTS][CAL_MAX_CANDIDATES][CAL_TRIALS]
    int ntrial[CAL_SLOTS][CAL_MAX_CANDIDATES]    # trials each candidate ran
    bint dropped[CAL_SLOTS][CAL_MAX_CANDIDATES]  # out after two passes (over CUT x the fastest)
    int ncand[CAL_SLOTS]                          # 0: trials not begun
    int trials[CAL_SLOTS]                         # trial calls completed
    int cand[CAL_SLOTS][CAL_MAX_CANDIDATES]
    double pred[CAL_SLOTS][CAL_MAX_CANDIDATES]    # the model's predictions, for its order
    double bar[CAL_SLOTS]    # candidates within bar x the fastest go by the model's order (TIE)
    # confirming a kept pick on the job's calls
    double window[CAL_SLOTS][CAL_WINDOW]          # this rank's times of the window's calls
    int in_window[CAL_SLOTS]                      # calls timed in the open window
    int wait[CAL_SLOTS]                           # calls left before the next window opens
    int gap[CAL_SLOTS]                            # calls between windows (doubles when confirmed)
    int redos[CAL_SLOTS]                          # times the class was measured again
    double confirmed[CAL_SLOTS]                   # the pick's last confirmed time; 0: none yet
    # the runner-up measured again on the job's calls, now and then
    int challenger[CAL_SLOTS]                     # its index in cand while it runs; -1: none
    int challenges[CAL_SLOTS]                     # times a runner-up ran
    int switches[CAL_SLOTS]                       # times one ran faster and became the pick
    int armed            # 1 + the class of the timed call under way; 0: none
    int armed_k          # its candidate; -1: a confirming call of the pick; -2: a challenger's
    double t0
    double armed_bytes   # its size: its time counts as at the class's at_bytes (cal_done)

# Everything cleared: nothing measured (enabled: calibrate at all; verbose: rank 0 prints).
cdef void cal_init(Calibration* cal, bint enabled, bint verbose, int nodes) noexcept nogil
# The class of a call of nbytes (apart: its output is not its input).
cdef int size_class(size_t nbytes, bint apart=*) noexcept nogil
# The trials of class cls begin: candidates (in the model's order of preference on ties) and
# their predicted seconds.
cdef void cal_begin(Calibration* cal, int cls, size_t nbytes, const int* candidates,
                    const double* predicted, int n) noexcept nogil
# The nearest class of the same kind (in place or apart), one or two classes away, that has a
# pick (its trials are over, or it had a lone candidate); -1 if none.
cdef int cal_neighbour(const Calibration* cal, int cls) noexcept nogil
# Whether algo's trials in class cls took over NEAR x the time of the class's pick.
cdef bint cal_lost(const Calibration* cal, int cls, int algo) noexcept nogil
# The algorithm for this call of nbytes in class cls (its trials under way): the next candidate
# in turn, timed from now.
cdef int cal_next(Calibration* cal, int cls, size_t nbytes) noexcept nogil
# The kept pick of class cls for this call of nbytes, timed from now when a confirming window is
# open; or the runner-up, while it challenges the pick.
cdef int cal_kept(Calibration* cal, int cls, size_t nbytes) noexcept nogil
# Whether the next call of class cls may be timed (its trials, a challenger's or a confirming
# window's calls); False only where it will not be.
cdef bint cal_may_time(const Calibration* cal, int cls) noexcept nogil
# The timed call under way also did `seconds` of its work before its timing began (its data's
# copy-in, riding with the vote): they count in its time.
cdef void cal_credit(Calibration* cal, double seconds) noexcept nogil
# After the call (every rank of comm calls it after every call it resolved, alike): a trial's
# time is agreed (the slowest rank's) and recorded, and the last trial of a class picks; a
# full confirming window is agreed and may send the class back to its trials or start a
# challenge; a challenger's calls are agreed and may make it the pick.
cdef int cal_done(Calibration* cal, MPI_Comm comm, Scratch* s) noexcept nogil
