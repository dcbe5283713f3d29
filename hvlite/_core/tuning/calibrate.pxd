from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.codes cimport ALG_COUNT
from hvlite._core.algorithms.algorithm cimport Scratch

# Size classes: powers of two from 1 KiB (everything smaller too) to 16 MiB (everything larger),
# once for calls in place and once for outputs apart from their inputs (CAL_CLASSES on): the
# algorithms rank differently (on one node out of place costs the shared-memory path one more
# pass over memory; ring and rhd read the input as they go).
cdef enum:
    CAL_LOW = 10
    CAL_HIGH = 24
    CAL_CLASSES = CAL_HIGH - CAL_LOW + 1
    CAL_SLOTS = 2 * CAL_CLASSES
    CAL_MAX_CANDIDATES = 8
    CAL_TRIALS = 3           # calls per candidate; the median counts

# What auto measured: per size class the candidates, their trial times (the slowest rank's) and
# the pick (-1: still trying).
cdef struct Calibration:
    bint enabled
    bint verbose         # rank 0 prints each class's figures (HVLITE_LOG_LEVEL=debug)
    int nodes            # for the names it prints: shm across nodes is hierarchical over shm
    signed char pick[CAL_SLOTS]
    double at_bytes[CAL_SLOTS]
    double seconds[CAL_SLOTS][ALG_COUNT]         # each candidate's median trial; 0: none
    double trial[CAL_SLOTS][CAL_MAX_CANDIDATES][CAL_TRIALS]
    int ncand[CAL_SLOTS]                          # 0: trials not begun
    int trials[CAL_SLOTS]                         # trial calls completed
    int cand[CAL_SLOTS][CAL_MAX_CANDIDATES]
    double pred[CAL_SLOTS][CAL_MAX_CANDIDATES]    # the model's predictions, for its order
    int armed            # 1 + the class of the trial call under way; 0: none
    int armed_k          # its candidate
    double t0

# The class of a call of nbytes (apart: its output is not its input).
cdef int size_class(size_t nbytes, bint apart=*) noexcept nogil
# The trials of class cls begin: candidates (in the model's order of preference on ties) and
# their predicted seconds.
cdef void cal_begin(Calibration* cal, int cls, size_t nbytes, const int* candidates,
                    const double* predicted, int n) noexcept nogil
# The algorithm for this call of class cls (its trials under way): the next candidate in turn,
# timed from now.
cdef int cal_next(Calibration* cal, int cls) noexcept nogil
# After the call (every rank of comm calls it after every call it resolved, alike): the trial's
# time is agreed (the slowest rank's) and recorded; the last trial of a class picks.
cdef int cal_done(Calibration* cal, MPI_Comm comm, Scratch* s) noexcept nogil
