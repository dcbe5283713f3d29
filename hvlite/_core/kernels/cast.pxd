cimport numpy as cnp

# dst[...] = src cast elementwise (float32 <-> float16/bfloat16, both C-contiguous, dst writable,
# the same number of elements, no overlap); TypeError or ValueError otherwise, before any pointer
# is used. For the faces that cast without a Python call (lean.pyx: the fp16/bf16 hook's call).
cdef int cast_arrays(cnp.ndarray src, cnp.ndarray dst) except -1
