# Rank 0's negotiation logic: submissions in, one response out; no MPI (see negotiation/controller.pyx).
from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from hvlite._core.negotiation.cache cimport Cache
from hvlite._core.negotiation.wire cimport Span
from hvlite._core.negotiation.table cimport Table
from hvlite._core.negotiation.stall cimport Stall

cdef void table_init(Table* t, int n) noexcept nogil
# Fold every rank's submission (payloads[r], possibly empty) into the table and cache, and
# encode the response for all ranks (without the autotune tail). `clock` is the round number.
cdef string controller_respond(Table* t, Cache* cache, const vector[Span]& payloads, double now,
                               int64_t clock, const Stall* stall) noexcept nogil
