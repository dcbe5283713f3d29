"""Measurements behind the cost model: one-way message time between two ranks (ping-pong),
and this machine's reduction rate. Both run without the GIL."""
from libc.stdlib cimport malloc, free
from libc.string cimport memset, memcpy
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport *
from hvlite._core.codes cimport DT_FLOAT32, check
from hvlite._core.kernels.reduce cimport reduce_into
from hvlite._core.codes cimport OP_SUM


def pingpong(MPI.Comm comm, int partner, int nbytes, int reps):
    """Median one-way time (s) of an nbytes message between this rank and `partner`; the lower
    rank sends first. Both ranks must call it with the same arguments."""
    cdef MPI_Comm c = comm.ob_mpi
    cdef int me = comm.Get_rank(), i, err = 0
    cdef char* buf = <char*>malloc(nbytes + 1)
    if buf == NULL:
        raise MemoryError()
    memset(buf, 0, nbytes + 1)
    times = []
    cdef double t0
    try:
        for i in range(reps + 2):
            with nogil:
                t0 = MPI_Wtime()
                if me < partner:
                    err = MPI_Send(buf, nbytes, MPI_BYTE, partner, 77, c) or \
                          MPI_Recv(buf, nbytes, MPI_BYTE, partner, 77, c, MPI_STATUS_IGNORE)
                else:
                    err = MPI_Recv(buf, nbytes, MPI_BYTE, partner, 77, c, MPI_STATUS_IGNORE) or \
                          MPI_Send(buf, nbytes, MPI_BYTE, partner, 77, c)
                t0 = MPI_Wtime() - t0
            check(err, "the ping-pong probe")
            if i >= 2:                        # the first exchanges set up the connection
                times.append(t0 / 2)
    finally:
        free(buf)
    times.sort()
    return times[len(times) // 2]


cdef double _best_seconds_per_byte(size_t nbytes, int reps, bint copy) except -1:
    """Fastest of reps passes over two nbytes buffers: a memcpy, or a float32 Sum in the core's
    kernel."""
    cdef char* a = <char*>malloc(nbytes)
    cdef char* b = <char*>malloc(nbytes)
    cdef double t0, best = 1e9
    cdef int i
    if a == NULL or b == NULL:
        free(a)
        free(b)
        raise MemoryError()
    memset(a, 0, nbytes)
    memset(b, 0, nbytes)
    with nogil:
        for i in range(reps):
            t0 = MPI_Wtime()
            if copy:
                memcpy(b, a, nbytes)
            else:
                reduce_into(a, b, nbytes // 4, DT_FLOAT32, OP_SUM)
            t0 = MPI_Wtime() - t0
            if t0 < best:
                best = t0
    free(a)
    free(b)
    return best / nbytes


def reduce_seconds_per_byte(int nbytes=32 << 20, int reps=3):
    """Seconds per byte of a float32 Sum in the core's kernel, on buffers larger than the caches
    (as copy_seconds_per_byte): on 4 MiB it came out 5-6 or 13-17 GB/s from one init() to the
    next, as much of it did or did not stay in cache."""
    return _best_seconds_per_byte(nbytes // 4 * 4, reps, False)


def copy_seconds_per_byte(int nbytes=32 << 20, int reps=3):
    """Seconds per byte of a memcpy (the shm algorithm's copies), measured while the other ranks
    do the same, as they will in the collective; on buffers larger than the caches, as the
    sizes where the choice between shm and ring matters are (a 4 MiB copy ran from cache at
    three times DRAM's rate, and auto took shm at 2 ranks where ring was 1.3-1.7x faster)."""
    return _best_seconds_per_byte(nbytes, reps, True)
