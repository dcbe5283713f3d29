from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.codes cimport ALG_COUNT
from hvlite._core.p2p cimport Scratch

# Size classes: powers of two from 1 KiB (everything smaller too) to 16 MiB (everything larger).
cdef enum:
    CAL_LOW = 10
    CAL_HIGH = 24
    CAL_CLASSES = CAL_HIGH - CAL_LOW + 1
    CAL_MAX_CANDIDATES = 8

# What auto measured: per size class the pick (-1: not measured yet), the size it was timed at
# and each candidate's time (the slowest rank's median; 0: not a candidate).
cdef struct Calibration:
    bint enabled
    bint verbose         # rank 0 prints each class's figures (HVLITE_LOG_LEVEL=debug)
    int nodes            # for the names it prints: shm across nodes is hierarchical over shm
    signed char pick[CAL_CLASSES]
    double at_bytes[CAL_CLASSES]
    double seconds[CAL_CLASSES][ALG_COUNT]

# Runs one all-reduce of `count` float32 in place with algorithm `algo` (the caller's context).
ctypedef int (*cal_run_fn)(void* ctx, char* buf, size_t count, int algo) noexcept nogil

cdef int size_class(size_t nbytes) noexcept nogil
# Times the candidates at nbytes (every rank of comm must call it alike: the candidates and
# their predicted seconds decide the repetitions) and stores the fastest as the class's pick.
cdef int calibrate_class(Calibration* cal, size_t nbytes, const int* candidates,
                         const double* predicted, int ncand, void* ctx, cal_run_fn run,
                         MPI_Comm comm, Scratch* s) noexcept nogil
