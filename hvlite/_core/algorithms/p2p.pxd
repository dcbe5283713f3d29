from mpi4py.libmpi cimport MPI_Comm

# Errors the core reports besides MPI's own codes: HV_ERR_* in codes.h.
from hvlite._core.codes cimport HV_ERR_NOMEM, HV_ERR_SHM, HV_ERR_COUNT

from hvlite._core.algorithms.algorithm cimport Scratch


cdef size_t block_start(size_t count, size_t parts, size_t b) noexcept nogil
cdef int comm_size(MPI_Comm comm) noexcept nogil
cdef int comm_rank(MPI_Comm comm) noexcept nogil
cdef int sendrecv(const char* sbuf, size_t sbytes, int dest,
                  char* rbuf, size_t rbytes, int src, MPI_Comm comm) noexcept nogil
# Non-powers of two (rhd, rd): p = largest power of two <= N; the first 2(N-p) ranks pair up,
# even ranks hand their buffer to the odd rank above and sit out (new rank -1) until fold_out.
cdef int pow2_floor(int n) noexcept nogil
cdef int fold_in(char* buf, size_t count, int dtype, int op, MPI_Comm comm, Scratch* s,
                 int* newrank) noexcept nogil
cdef int fold_out(char* buf, size_t nbytes, MPI_Comm comm) noexcept nogil
cdef int unfolded_rank(int newrank, int n) noexcept nogil
cdef int sendrecv_reduce(const char* sbuf, size_t scount, int dest,
                         char* acc, size_t rcount, int src,
                         int dtype, int op, MPI_Comm comm, Scratch* s) noexcept nogil
# The same with acc = init (op) received, segment by segment (init NULL: acc op= received).
cdef int sendrecv_reduce_from(const char* sbuf, size_t scount, int dest, const char* init,
                              char* acc, size_t rcount, int src,
                              int dtype, int op, MPI_Comm comm, Scratch* s) noexcept nogil
