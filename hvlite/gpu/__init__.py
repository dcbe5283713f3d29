"""Device (CUDA) buffers through the ordinary collectives.

A collective handed an object that lives on a GPU (a CuPy array, a torch CUDA tensor, anything
with `__cuda_array_interface__` or a CUDA DLPack capsule) is routed here instead of to NumPy.
Nothing in this package imports CuPy until such an object arrives, so CPU jobs never pay for it.

    arrays      recognise device objects, and wrap them for CuPy
    engine      the copy-engine interface (streams, events, async copies) and its CuPy version
    staging     the chunked, double-buffered device<->host pipeline, pure scheduling
    cuda_aware  is the MPI library CUDA-aware? (MPIX_Query_cuda_support, HVLITE_CUDA_AWARE)
    ring        the all-reduce for CUDA-aware MPI: device buffers to MPI, reductions on the GPU
    worker      one thread per process set that runs device collectives in submission order
    api         the device forms of the collectives, called from hvlite.collectives
"""
from hvlite.gpu.arrays import is_device_array

__all__ = ["is_device_array"]
