"""Binomial-tree all-reduce: reduce to rank 0 along a binomial tree, then broadcast down it.

Cost (N ranks, n bytes): 2⌈log2 N⌉(α + nβ) + ⌈log2 N⌉nγ -- the fewest rounds, so the choice for
small buffers where latency dominates. Rank r's parent is r minus its lowest set bit; rank 0
alone holds the fully reduced buffer, which the broadcast hands to everyone unchanged.
"""
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.kernels.reduce cimport divide_by
from hvlite._core.algorithms.p2p cimport comm_size, comm_rank, sendrecv, sendrecv_reduce


cdef int tree_reduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                     Scratch* s) noexcept nogil:
    cdef int n = comm_size(comm), r = comm_rank(comm), mask = 1, err
    while mask < n:
        if r & mask:
            return sendrecv_reduce(buf, count, r - mask, NULL, 0, MPI_PROC_NULL, dtype, op, comm, s)
        if r + mask < n:
            err = sendrecv_reduce(NULL, 0, MPI_PROC_NULL, buf, count, r + mask, dtype, op, comm, s)
            if err:
                return err
        mask <<= 1
    return 0


cdef int tree_broadcast(char* buf, size_t nbytes, MPI_Comm comm) noexcept nogil:
    cdef int n = comm_size(comm), r = comm_rank(comm), mask = 1, err
    while mask < n and not (r & mask):
        mask <<= 1
    if r != 0:
        err = sendrecv(NULL, 0, MPI_PROC_NULL, buf, nbytes, r - mask, comm)
        if err:
            return err
    mask >>= 1
    while mask > 0:
        if r + mask < n:
            err = sendrecv(buf, nbytes, r + mask, NULL, 0, MPI_PROC_NULL, comm)
            if err:
                return err
        mask >>= 1
    return 0


cdef int tree_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                        Scratch* s) noexcept nogil:
    cdef int err = tree_reduce(buf, count, dtype, op, comm, s)
    if err:
        return err
    if s.divisor > 1 and comm_rank(comm) == 0:     # an Average: the root divides, once
        divide_by(buf, count, dtype, s.divisor)
    return tree_broadcast(buf, count * dtype_size(dtype), comm)
