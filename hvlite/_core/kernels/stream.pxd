# The copy past the cache (kernels/stream.h), declared once for its callers.
cdef extern from "kernels/stream.h" nogil:
    # `left` bytes from `at` to bring toward the cache while a copy stores (taken as it goes)
    ctypedef struct hv_prefetch:
        const char* at
        size_t left
    void hv_stream_copy_ahead(char* dst, const char* src, size_t n, hv_prefetch* ahead)
    # tests: the store width (2: 64, 1: 32, 0: 16 bytes; -1 asks); returns the one before
    int hv_stream_force(int level)
