# Timeline recording: the coordinator pushes one record per finished request (and per round,
# and per user span); a writer thread formats them as Chrome trace events, without the GIL.
from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from hvlite._core.request cimport hv_monitor, Item, Request

cdef extern from "stdio.h" nogil:
    ctypedef struct FILE

cdef enum:
    K_SPAN = 100        # a user's compute span
    K_CYCLE = 101       # one negotiation round (HVLITE_TIMELINE_MARK_CYCLES)

cdef cppclass TEvent:
    string name
    int kind            # collective code, K_SPAN or K_CYCLE
    double submitted, ready, start, packed, ran, unpacked, done
    int64_t nbytes
    int dtype
    int fused
    int algorithm
    string late         # ranks that submitted last, when rank 0 knows them ("1,3")
    string row          # K_SPAN: the tensor row it belongs on (empty: the compute row)
    string args         # K_SPAN: a JSON object shown as the event's args (may be empty)

cdef cppclass Recorder:
    hv_monitor mon
    vector[TEvent] events
    bint on
    bint mark_cycles
    FILE* f
    double origin       # this rank's clock at the common start
    int pid
    unordered_map[string, int] tids
    int next_tid
    int64_t written
    int err             # errno of the first write that failed (recording stopped then), or 0

cdef void rec_init(Recorder* r) noexcept nogil
cdef void rec_push(Recorder* r, TEvent& e) noexcept nogil
# A finished request's record: its item's phases, `nbytes` moved, the algorithm that ran.
cdef void rec_item(Recorder* r, Item* it, Request* req, size_t nbytes) noexcept nogil

cdef class Writer:
    cdef Recorder* r

cdef Writer make_writer(Recorder* r)
