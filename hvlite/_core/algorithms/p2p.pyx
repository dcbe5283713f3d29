"""Point-to-point building blocks shared by every algorithm.

Chunk arithmetic lives here once: `block_start(count, parts, b)` is where block b of `parts`
nearly-equal blocks begins (the first `count % parts` blocks hold one extra element).
Messages never exceed INT_MAX bytes: large transfers go in pieces that both sides cut the same way.
Every wait goes through liveness.wait_all, so a peer lost mid-transfer ends it with HV_ERR_LOST.
"""
from libc.stdlib cimport malloc, free
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.kernels.reduce cimport reduce_into, reduce_to
from hvlite._core.liveness cimport wait_all
from hvlite._core.codes cimport nomem

cdef enum:
    TAG = 0x4856
    PIECE = 1 << 30      # bytes per message for plain copies


cdef size_t block_start(size_t count, size_t parts, size_t b) noexcept nogil:
    cdef size_t base = count // parts, extra = count % parts
    return b * base + (b if b < extra else extra)


cdef int comm_size(MPI_Comm comm) noexcept nogil:
    cdef int n = 0
    MPI_Comm_size(comm, &n)
    return n


cdef int comm_rank(MPI_Comm comm) noexcept nogil:
    cdef int r = 0
    MPI_Comm_rank(comm, &r)
    return r


cdef int sendrecv(const char* sbuf, size_t sbytes, int dest,
                  char* rbuf, size_t rbytes, int src, MPI_Comm comm) noexcept nogil:
    """Send sbytes to dest while receiving rbytes from src (either peer may be MPI_PROC_NULL)."""
    cdef MPI_Request req[2]
    cdef size_t soff = 0, roff = 0, sl, rl
    cdef int err
    if dest == MPI_PROC_NULL:
        sbytes = 0
    if src == MPI_PROC_NULL:
        rbytes = 0
    while soff < sbytes or roff < rbytes:
        req[0] = MPI_REQUEST_NULL
        req[1] = MPI_REQUEST_NULL
        if roff < rbytes:
            rl = rbytes - roff if rbytes - roff < PIECE else PIECE
            err = MPI_Irecv(rbuf + roff, <int>rl, MPI_BYTE, src, TAG, comm, &req[0])
            if err:
                return err
            roff += rl
        if soff < sbytes:
            sl = sbytes - soff if sbytes - soff < PIECE else PIECE
            err = MPI_Isend(<void*>(sbuf + soff), <int>sl, MPI_BYTE, dest, TAG, comm, &req[1])
            if err:
                return err
            soff += sl
        err = wait_all(2, req, False)
        if err:
            return err
    return 0


cdef int sendrecv_reduce(const char* sbuf, size_t scount, int dest,
                         char* acc, size_t rcount, int src,
                         int dtype, int op, MPI_Comm comm, Scratch* s) noexcept nogil:
    """Send scount elements to dest while receiving rcount from src and reducing them into acc.

    Both directions go in segments of s.seg_bytes, so the receiver reduces each segment while it
    is still in cache and the next one is already posted. Sender and receiver cut the same way.
    """
    return sendrecv_reduce_from(sbuf, scount, dest, NULL, acc, rcount, src, dtype, op, comm, s)


cdef int sendrecv_reduce_from(const char* sbuf, size_t scount, int dest, const char* init,
                              char* acc, size_t rcount, int src,
                              int dtype, int op, MPI_Comm comm, Scratch* s) noexcept nogil:
    """sendrecv_reduce, with acc taking init (op) the received elements segment by segment
    (init NULL: acc holds its operand already). An out-of-place all-reduce saves its copy of the
    whole input this way: each segment's result is written in one pass (reduce_to)."""
    cdef size_t es = dtype_size(dtype)
    cdef size_t seg = s.seg_bytes // es
    if seg == 0:
        seg = 1
    if dest == MPI_PROC_NULL:
        scount = 0
    if src == MPI_PROC_NULL:
        rcount = 0
    cdef size_t nsend = (scount + seg - 1) // seg
    cdef size_t nrecv = (rcount + seg - 1) // seg
    cdef MPI_Request* sreq = NULL
    cdef MPI_Request rreq[2]
    cdef size_t j, off, n
    cdef int err = 0, err2
    if nsend:
        sreq = <MPI_Request*>malloc(nsend * sizeof(MPI_Request))
        if sreq == NULL:
            return nomem(nsend * sizeof(MPI_Request))
    rreq[0] = MPI_REQUEST_NULL
    rreq[1] = MPI_REQUEST_NULL
    if nrecv:
        n = rcount if rcount < seg else seg
        err = MPI_Irecv(s.buf, <int>(n * es), MPI_BYTE, src, TAG, comm, &rreq[0])
    j = 0
    while j < nsend and not err:
        off = j * seg
        n = scount - off if scount - off < seg else seg
        err = MPI_Isend(<void*>(sbuf + off * es), <int>(n * es), MPI_BYTE, dest, TAG, comm, &sreq[j])
        j += 1
    if err:
        free(sreq)
        return err
    for j in range(nrecv):
        if j + 1 < nrecv:
            off = (j + 1) * seg
            n = rcount - off if rcount - off < seg else seg
            err = MPI_Irecv(s.buf + ((j + 1) % 2) * s.seg_bytes, <int>(n * es), MPI_BYTE, src, TAG,
                            comm, &rreq[(j + 1) % 2])
            if err:
                break
        err = wait_all(1, &rreq[j % 2], False)
        if err:
            break
        off = j * seg
        n = rcount - off if rcount - off < seg else seg
        if init != NULL:
            reduce_to(acc + off * es, init + off * es, s.buf + (j % 2) * s.seg_bytes, n, dtype, op)
        else:
            reduce_into(acc + off * es, s.buf + (j % 2) * s.seg_bytes, n, dtype, op)
    if nsend:
        err2 = wait_all(<int>nsend, sreq, False)
        if not err:
            err = err2
        free(sreq)
    return err


cdef int pow2_floor(int n) noexcept nogil:
    cdef int p = 1
    while p * 2 <= n:
        p *= 2
    return p


cdef int unfolded_rank(int newrank, int n) noexcept nogil:
    """The real rank of a rank numbered among the p survivors of fold_in."""
    cdef int rem = n - pow2_floor(n)
    return newrank * 2 + 1 if newrank < rem else newrank + rem


cdef int fold_in(char* buf, size_t count, int dtype, int op, MPI_Comm comm, Scratch* s,
                 int* newrank) noexcept nogil:
    cdef int n = comm_size(comm), r = comm_rank(comm), rem = n - pow2_floor(n)
    if r >= 2 * rem:
        newrank[0] = r - rem
        return 0
    if r % 2 == 0:
        newrank[0] = -1
        return sendrecv_reduce(buf, count, r + 1, NULL, 0, MPI_PROC_NULL, dtype, op, comm, s)
    newrank[0] = r // 2
    return sendrecv_reduce(NULL, 0, MPI_PROC_NULL, buf, count, r - 1, dtype, op, comm, s)


cdef int fold_out(char* buf, size_t nbytes, MPI_Comm comm) noexcept nogil:
    cdef int n = comm_size(comm), r = comm_rank(comm), rem = n - pow2_floor(n)
    if r >= 2 * rem:
        return 0
    if r % 2:
        return sendrecv(buf, nbytes, r - 1, NULL, 0, MPI_PROC_NULL, comm)
    return sendrecv(NULL, 0, MPI_PROC_NULL, buf, nbytes, r + 1, comm)
