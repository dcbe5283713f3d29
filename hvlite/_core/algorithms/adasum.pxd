from mpi4py.libmpi cimport MPI_Comm

# Adasum over `comm`, in place on `buf`: ntensors tensors of counts[t] elements laid end to end,
# each combined with its own dot products. Float dtypes only (the Python layer checks).
cdef int adasum_allreduce(char* buf, const size_t* counts, size_t ntensors, int dtype,
                          MPI_Comm comm) noexcept nogil
