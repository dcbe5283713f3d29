from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from hvlite._core.request cimport Request, Meta, Item
from hvlite._core.execute.context cimport Context

cdef cppclass FusionBuffer:
    char* buf
    size_t cap
    size_t threshold
    size_t tensor_limit      # tensors this large or larger are reduced alone, in their output
    vector[char] used        # run_allreduces' own lists, kept from round to round (no allocation)
    vector[size_t] batch

cdef void fusion_free(FusionBuffer* f) noexcept nogil
# Runs every all-reduce item: fused per (dtype, op, algorithm) up to the threshold, in item order.
cdef void run_allreduces(Context* c, FusionBuffer* f, vector[Item]& items, long divisor) noexcept nogil
