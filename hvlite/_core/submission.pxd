cimport numpy as cnp
from libcpp.string cimport string
from hvlite._core.request cimport Request

# What one rank submits for one collective, besides its name and buffers (an options object, as
# Gloo's AllreduceOptions and c10d's option structs): read by Coordinator.submit at C speed.
cdef class Submission:
    cdef readonly int collective
    cdef readonly int dtype
    cdef readonly int op
    cdef readonly int root
    cdef readonly int algorithm
    cdef readonly tuple shape       # None: the input's shape (() without one)
    cdef readonly object splits     # alltoall: rows sent to each rank (None: equal parts)
    cdef readonly str error         # a failed local check: every rank's handle fails, naming it
    cdef readonly bint inline       # the caller waits for it now: its thread runs the rounds
    cdef readonly bint reused       # an automatic name: one still in flight is waited for

# A new Request (the caller owns it) for `s` under `name`, reading `inp`, writing `out` (either
# may be None); pending, in no cache slot, submitted now.
cdef Request* new_request(Submission s, const string& name, cnp.ndarray inp, cnp.ndarray out) except NULL
# The same into a request that has completed and is no longer held (run_now's spare).
cdef int fill_request(Request* req, Submission s, const char* name, size_t n, cnp.ndarray inp,
                      cnp.ndarray out, bint stamp) except -1
