# Autotune state: rank 0 runs the trials; every rank applies the settings rank 0 publishes.
from libcpp.string cimport string
from libcpp.vector cimport vector
from hvlite._core.request cimport hv_monitor

cdef extern from "stdio.h" nogil:
    ctypedef struct FILE

# Autotune (rank 0 decides, every rank applies): a grid of (fusion threshold, cycle time)
# trials, each scored by bytes all-reduced per second of wall time over a window of rounds;
# then the best three are measured again and the best mean wins (single windows are noisy).
cdef cppclass Tuner:
    bint on
    bint frozen
    bint publish           # rank 0: a new setting goes out with the next round
    vector[size_t] thresholds
    vector[double] cycles
    int trial              # index into the grid; -1 while warming up
    int warmup_rounds
    int window_rounds
    double window_seconds
    int rounds
    double bytes
    double t0
    vector[double] scores       # one per grid point (first pass)
    vector[int] finalists       # second pass: the best few, measured again
    int final_pos               # position in finalists during the second pass; -1 before it
    vector[double] rescores
    int best
    FILE* log

cdef void tune_init(Tuner* t) noexcept nogil
cdef void tune_start(Tuner* t, vector[size_t]& thresholds, vector[double]& cycles,
                     int warmup_rounds, int window_rounds, double window_seconds,
                     const string& log_path) noexcept nogil
cdef void tune_round(Tuner* t, double nbytes) noexcept nogil
cdef void tune_window_reset(Tuner* t) noexcept nogil
# tune_start over the grid thresholds x cycles_ms (Python sequences; log_path None: no log),
# under `mon` (the caller's lock on the tuner).
cdef int tune_grid(Tuner* t, hv_monitor* mon, thresholds, cycles_ms, int warmup_rounds,
                   int window_rounds, double window_seconds, log_path) except -1
