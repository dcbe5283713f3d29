"""Ring all-reduce: reduce-scatter around the ring, then allgather around it.

Cost (N ranks, n bytes): 2(N-1)α + 2((N-1)/N)nβ + ((N-1)/N)nγ -- bandwidth-optimal, so the choice
for large buffers. The buffer is cut into N blocks; in step s of the reduce-scatter rank r sends
block (r-s) mod N to its right neighbour and reduces block (r-s-1) mod N from its left one, so after
N-1 steps rank r owns block (r+1) mod N, reduced exactly once in ring order. The allgather then
copies owned blocks around, so every rank ends with the owner's bits.
"""
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.kernels.reduce cimport divide_by
from libc.string cimport memcpy
from hvlite._core.algorithms.p2p cimport block_start, comm_size, comm_rank, sendrecv, sendrecv_reduce_from


cdef int ring_owned_block(int rank, int n) noexcept nogil:
    return (rank + 1) % n


cdef int ring_reduce_scatter(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                             Scratch* s) noexcept nogil:
    return _reduce_scatter(NULL, buf, count, dtype, op, comm, s)


cdef int _reduce_scatter(const char* input, char* buf, size_t count, int dtype, int op,
                         MPI_Comm comm, Scratch* s) noexcept nogil:
    """input NULL: in place. Otherwise every block a rank reduces is one it has not touched yet,
    so each takes input's elements segment by segment as it is reduced, and the first step sends
    straight from input."""
    cdef int n = comm_size(comm), r = comm_rank(comm), step, sb, rb, err
    cdef size_t es = dtype_size(dtype), so, sl, ro, rl
    cdef const char* src
    if n == 1:
        return 0
    for step in range(n - 1):
        sb = (r - step + n) % n
        rb = (r - step - 1 + 2 * n) % n
        so = block_start(count, n, sb)
        sl = block_start(count, n, sb + 1) - so
        ro = block_start(count, n, rb)
        rl = block_start(count, n, rb + 1) - ro
        src = input if input != NULL and step == 0 else <const char*>buf
        err = sendrecv_reduce_from(src + so * es, sl, (r + 1) % n,
                                   input + ro * es if input != NULL else NULL, buf + ro * es, rl,
                                   (r - 1 + n) % n, dtype, op, comm, s)
        if err:
            return err
    return 0


cdef int ring_allgather(char* buf, size_t count, size_t esize, MPI_Comm comm) noexcept nogil:
    cdef int n = comm_size(comm), r = comm_rank(comm), step, sb, rb, err
    cdef size_t so, sl, ro, rl
    if n == 1:
        return 0
    for step in range(n - 1):
        sb = (r + 1 - step + n) % n
        rb = (r - step + n) % n
        so = block_start(count, n, sb)
        sl = block_start(count, n, sb + 1) - so
        ro = block_start(count, n, rb)
        rl = block_start(count, n, rb + 1) - ro
        err = sendrecv(buf + so * esize, sl * esize, (r + 1) % n,
                       buf + ro * esize, rl * esize, (r - 1 + n) % n, comm)
        if err:
            return err
    return 0


cdef void _divide_owned(char* buf, size_t count, int dtype, MPI_Comm comm, Scratch* s) noexcept nogil:
    """An Average's division on the block this rank owns, before the allgather copies it."""
    cdef int n = comm_size(comm), b = ring_owned_block(comm_rank(comm), n)
    cdef size_t lo = block_start(count, n, b)
    if s.divisor > 1:
        divide_by(buf + lo * dtype_size(dtype), block_start(count, n, b + 1) - lo, dtype, s.divisor)


cdef int ring_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                        Scratch* s) noexcept nogil:
    cdef int err = ring_reduce_scatter(buf, count, dtype, op, comm, s)
    if err:
        return err
    _divide_owned(buf, count, dtype, comm, s)
    return ring_allgather(buf, count, dtype_size(dtype), comm)


cdef int ring_allreduce_from(const char* input, char* buf, size_t count, int dtype, int op,
                             MPI_Comm comm, Scratch* s) noexcept nogil:
    """Out of place: the reduce-scatter reads input as it goes, the allgather fills the rest."""
    cdef int err
    if comm_size(comm) == 1:
        memcpy(buf, input, count * dtype_size(dtype))
        _divide_owned(buf, count, dtype, comm, s)
        return 0
    err = _reduce_scatter(input, buf, count, dtype, op, comm, s)
    if err:
        return err
    _divide_owned(buf, count, dtype, comm, s)
    return ring_allgather(buf, count, dtype_size(dtype), comm)
