# A submitted collective, as the coordinator sees it: plain C++ data, no Python objects.
from libc.stdint cimport int64_t, uint8_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from hvlite._core.sync cimport *

# Collectives, statuses and error kinds are declared once, in codes.h.
from hvlite._core.codes cimport *

# What every rank must agree on for one tensor name.
cdef cppclass Meta:
    uint8_t collective
    int dtype
    int op
    int root
    int algorithm
    vector[int64_t] shape      # allgather / alltoall: the first dimension may differ by rank
    string error               # a failed local check: every rank's handle fails, naming it
    uint8_t apart              # output apart from the input: this rank's in a submission; in an
                               # answer (and so in the cache) whether any rank's was (auto times
                               # such calls in classes of their own, alike on every rank)

cdef cppclass Request:
    string name
    Meta meta
    char* input                 # contiguous input (may equal output for in-place)
    char* output                # preallocated output, or NULL when the coordinator allocates it
    size_t output_bytes         # allgather / alltoall: output's size; the result goes there when
                                # it is exactly that long (a pooled array), else into `result`
    vector[int64_t] splits      # alltoall: rows sent to each rank (empty: equal split)
    double submitted            # hv_now() at submit
    int status
    int error_kind
    int error_code              # MPI error code for E_MPI
    string error
    # results the coordinator produces
    char* result                # malloc'd (allgather / alltoall output); the Python side owns it after
    bint result_given           # the allgather / alltoall result was written into output instead
    int64_t result_rows
    vector[int64_t] result_splits
    int64_t value               # join: the last rank to join
    int algorithm_used
    bint orphan                 # the Python handle is gone: the coordinator deletes it on completion
    void* held                  # its Pending, borrowed (the coordinator's `live` set owns it)
    bint settled_here           # completed by its own waiter's express round: that wait lets go
                                # of its Pending (not the sweep); the coordinator is done with it
    # negotiation state (coordinator thread only)
    int slot                    # response-cache slot, or -1
    bint sent                   # already told rank 0 (cache misses)

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
    int ride             # >= 0: reduced inside the round's agreement (negotiation/agree.pyx), the ride's index
    bint hit             # from the response cache on every rank (so every rank's metadata, first
                         # dimension included, equals the slot's)

# Whether alltoall's splits send exactly a rank's `rows` rows to its n peers: n counts, none
# negative, adding up to rows (in 64 bits, no wrap). Splits reach the core checked by Python,
# but one submitted past those checks must not make the core read past its input.
cdef inline bint splits_fit(const vector[int64_t]& splits, size_t n, int64_t rows) noexcept nogil:
    cdef int64_t left = rows
    cdef size_t j
    if splits.size() != n or rows < 0:
        return False
    for j in range(n):
        if splits[j] < 0 or splits[j] > left:
            return False
        left -= splits[j]
    return True         # rows past the splits' sum stay unsent, as in Horovod


# Elements of a tensor of this metadata (the product of its shape).
cdef inline size_t item_count(const Meta& m) noexcept nogil:
    cdef size_t n = 1, i
    for i in range(m.shape.size()):
        n *= <size_t>m.shape[i]
    return n
