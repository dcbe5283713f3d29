# Element types the core reduces. The codes travel between ranks in metadata checks: never renumber.
cdef enum DType:
    DT_FLOAT16 = 0
    DT_BFLOAT16 = 1
    DT_FLOAT32 = 2
    DT_FLOAT64 = 3
    DT_INT8 = 4
    DT_UINT8 = 5
    DT_INT16 = 6
    DT_UINT16 = 7
    DT_INT32 = 8
    DT_UINT32 = 9
    DT_INT64 = 10
    DT_UINT64 = 11
    DT_COUNT = 12

cdef size_t dtype_size(int dt) noexcept nogil
