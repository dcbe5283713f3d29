# Stall inspection: when a rank asks for a report, and rank 0's report and shutdown verdict.
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from hvlite._core.negotiation.table cimport Table

cdef cppclass Stall:
    double check            # seconds a name may wait before it is reported; 0: never
    double shutdown         # seconds after which a stall is fatal; 0: never
    double last             # this rank: when it last asked for a report

# What ranks said they are waiting on this round (REC_PROBE records), by name.
cdef cppclass Probes:
    unordered_map[string, vector[char]] ranks
    unordered_map[string, double] age

cdef void stall_init(Stall* s, double check, double shutdown, double now) noexcept nogil
# Any rank: whether to ask for a report this round, given its oldest pending submit time.
cdef bint stall_due(Stall* s, double now, double oldest) noexcept nogil
cdef void stall_note(Probes* p, const string& name, int r, int n, double age) noexcept nogil
# Rank 0: print a line per stalled name; returns the fatal message once shutdown time passed, else "".
cdef string stall_report(const Stall* s, Table* t, Probes* p, int n, double now) noexcept nogil
