from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from hvlite._core.request cimport Request, Meta
from hvlite._core.dispatch cimport Context

# One tensor that is ready on every rank this round. req is NULL on a rank that has joined.
cdef cppclass Item:
    string name
    Meta meta
    Request* req
    int64_t value
    int err
    string late          # ranks that submitted last (rank 0 knows it for cache misses)
    int fused            # tensors in this item's batch
    double ready, start, packed, ran, unpacked   # timeline: when each phase ended
    int ride             # >= 0: reduced inside the round's agreement (agree.pyx), the ride's index
    bint hit             # from the response cache on every rank (so every rank's metadata, first
                         # dimension included, equals the slot's)

cdef cppclass FusionBuffer:
    char* buf
    size_t cap
    size_t threshold
    size_t tensor_limit      # tensors this large or larger are reduced alone, in their output

cdef void fusion_free(FusionBuffer* f) noexcept nogil
# Runs every all-reduce item: fused per (dtype, op, algorithm) up to the threshold, in item order.
cdef void run_allreduces(Context* c, FusionBuffer* f, vector[Item]& items, long divisor) noexcept nogil
cdef size_t item_count(const Meta& m) noexcept nogil
