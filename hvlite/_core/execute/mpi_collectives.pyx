"""The collectives other than all-reduce, on MPI's own implementations (MPI does these well).

Each runs as MPI's non-blocking call, waited on through liveness.wait_all. Sizes that differ by rank (allgather's first dimension, alltoall's splits) are exchanged first,
so the coordinator allocates each result once, at its final size. Byte counts above INT_MAX are
an error here (MPI's int counts).
"""
# distutils: language = c++
from libc.string cimport memcpy
from libc.stdint cimport int64_t, uint64_t, INT64_MAX
from libc.limits cimport INT_MAX
from libcpp.vector cimport vector
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.memory cimport result_into
from hvlite._core.kernels.reduce cimport kernel_op, finish_op
from hvlite._core.algorithms.mpiref cimport ensure_half_ops, mpi_type, mpi_op
from hvlite._core.request cimport *
from hvlite._core.codes cimport *
from hvlite._core.request cimport Item, item_count
from hvlite._core.liveness cimport wait_all
from hvlite._core.shm.segment cimport ShmArea
from hvlite._core.shm.copy cimport shm_broadcast, shm_allgather, shm_alltoall, SHM_COPY_MAX
from hvlite._core.shm.reducescatter cimport shm_reducescatter


cdef inline int _wait(int err, MPI_Request* req) noexcept nogil:
    """The non-blocking call's result, polled through the liveness watch (a lost peer ends it)."""
    return err if err else wait_all(1, req, False)



cdef int _counts(vector[int64_t]& rows, size_t row_bytes, vector[int]& counts,
                 vector[int]& displs) noexcept nogil:
    cdef size_t i
    cdef int64_t off = 0, b
    cdef uint64_t total = 0
    counts.resize(rows.size())
    displs.resize(rows.size())
    for i in range(rows.size()):     # checked before multiplying: a peer's count may be anything
        if rows[i] < 0 or (row_bytes and <uint64_t>rows[i] > <uint64_t>INT_MAX // row_bytes):
            return HV_ERR_COUNT
        total += <uint64_t>rows[i]  # rows of zero bytes: only their count can wrap
        if total > <uint64_t>INT64_MAX:
            return HV_ERR_COUNT
        b = rows[i] * <int64_t>row_bytes
        if off + b > INT_MAX:
            return HV_ERR_COUNT
        counts[i] = <int>b
        displs[i] = <int>off
        off += b
    return 0


cdef int _allgather(MPI_Comm comm, const char* input, int64_t rows, size_t row_bytes,
                    char** result, int64_t* total_rows, vector[int64_t]& all_rows,
                    bint same_rows, char* into, size_t into_bytes) noexcept nogil:
    """Every rank's rows, in rank order, into a result allocated here at its final size, keeping
    every rank's row count (rows of zero bytes leave no other trace).
    `same_rows`: every rank is known to hold as many rows as this one (a response-cache hit
    everywhere), so the counts need no exchange."""
    cdef int n = 0, err
    cdef size_t i
    MPI_Comm_size(comm, &n)
    cdef vector[int] counts, displs
    cdef MPI_Request req
    all_rows.resize(n)
    if same_rows:
        for i in range(<size_t>n):
            all_rows[i] = rows
    else:
        err = _wait(MPI_Iallgather(&rows, 1, MPI_INT64_T, all_rows.data(), 1, MPI_INT64_T, comm,
                                   &req), &req)
        if err:
            return err
    err = _counts(all_rows, row_bytes, counts, displs)
    if err:
        return err
    total_rows[0] = 0
    for i in range(<size_t>n):      # checked by _counts: no wrap
        total_rows[0] += all_rows[i]
    result[0] = result_into(into, into_bytes, total_rows[0] * row_bytes)
    if result[0] == NULL:
        return nomem(total_rows[0] * row_bytes + 1)
    return _wait(MPI_Iallgatherv(<void*>input, <int>(rows * row_bytes), MPI_BYTE, result[0],
                                 counts.data(), displs.data(), MPI_BYTE, comm, &req), &req)


cdef int run_broadcast(MPI_Comm comm, char* buf, size_t nbytes, int root) noexcept nogil:
    cdef size_t off = 0, k
    cdef int err
    cdef MPI_Request req
    while off < nbytes:
        k = nbytes - off if nbytes - off < (1 << 30) else (1 << 30)
        err = _wait(MPI_Ibcast(buf + off, <int>k, MPI_BYTE, root, comm, &req), &req)
        if err:
            return err
        off += k
    return 0


cdef int run_alltoall(MPI_Comm comm, const char* input, int64_t rows, const vector[int64_t]& splits,
                      size_t row_bytes, char** result, vector[int64_t]* recv_splits, char* into,
                      size_t into_bytes) noexcept nogil:
    """`rows`: this rank's first dimension; splits that add up to more (they reached the
    core past the Python checks) are refused on every rank, before any row is read."""
    cdef int n = 0, err
    cdef size_t i
    cdef int64_t total = 0
    MPI_Comm_size(comm, &n)
    cdef vector[int64_t] send = splits
    if not splits_fit(splits, <size_t>n, rows):
        send.assign(n, -1)      # refused below, on every rank, after the counts' exchange
    cdef vector[int] scounts, sdispls, rcounts, rdispls
    cdef MPI_Request req
    recv_splits.resize(n)
    err = _wait(MPI_Ialltoall(send.data(), 1, MPI_INT64_T, recv_splits.data(), 1, MPI_INT64_T, comm,
                              &req), &req)
    if err:
        return err
    cdef int bad = 0, anybad = 0
    if _counts(send, row_bytes, scounts, sdispls) or _counts(recv_splits[0], row_bytes, rcounts, rdispls):
        bad = 1
    for i in range(<size_t>n if not bad else 0):    # each count checked above: no wrap
        total += recv_splits[0][i]
    # a count one rank refuses must stop every rank here, or the others would wait in the
    # exchange for ever: one more small all-reduce, off the all-reduce path
    err = _wait(MPI_Iallreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, comm, &req), &req)
    if err:
        return err
    if anybad:
        return HV_ERR_COUNT
    result[0] = result_into(into, into_bytes, total * row_bytes)
    if result[0] == NULL:
        return nomem(total * row_bytes + 1)
    return _wait(MPI_Ialltoallv(<void*>input, scounts.data(), sdispls.data(), MPI_BYTE,
                                result[0], rcounts.data(), rdispls.data(), MPI_BYTE, comm, &req), &req)


cdef int64_t reducescatter_rows(int64_t rows, int size, int rank) noexcept nogil:
    """Rows rank `rank` receives: the first rows % size ranks get one extra (Horovod's split)."""
    return rows // size + (1 if rank < rows % size else 0)


cdef int run_reducescatter(MPI_Comm comm, const char* input, char* output, int64_t rows,
                           size_t row_elems, int dtype, int op) noexcept nogil:
    cdef int n = 0, r = 0, err, i
    MPI_Comm_size(comm, &n)
    MPI_Comm_rank(comm, &r)
    cdef vector[int] counts
    cdef int64_t c
    cdef MPI_Request req
    counts.resize(n)
    for i in range(n):
        c = reducescatter_rows(rows, n, i) * <int64_t>row_elems
        if c > INT_MAX:
            return HV_ERR_COUNT
        counts[i] = <int>c
    err = ensure_half_ops()
    if err:
        return err
    err = _wait(MPI_Ireduce_scatter(<void*>input, output, counts.data(), mpi_type(dtype),
                                    mpi_op(dtype, kernel_op(op)), comm, &req), &req)
    if err == 0:
        finish_op(output, <size_t>counts[r], dtype, op, n)
    return err


cdef int run_item(MPI_Comm comm, Item* it, ShmArea* node) noexcept nogil:
    """One ready collective other than all-reduce. A rank that has joined holds no request:
    only barrier and join reach it here, since the controller refuses any other collective
    while a rank has joined (negotiation/controller.pyx, _joined_conflict, Horovod's rule).
    `node`: the set is one node with a shared segment (the same on every rank): broadcast,
    allgather, alltoall (shm/copy.pyx) and reducescatter (shm/reducescatter.pyx) go through it."""
    cdef Request* req = it.req
    cdef int c = it.meta.collective, d, err = 0, rank = 0, size = 0
    cdef size_t es, row_bytes
    cdef int64_t rows, s
    cdef vector[int64_t] splits
    if c == C_BARRIER:
        return 0        # the round's agreement was the barrier: every rank has arrived
    MPI_Comm_rank(comm, &rank)
    MPI_Comm_size(comm, &size)
    es = dtype_size(it.meta.dtype) if 0 <= it.meta.dtype < DT_COUNT else 1
    row_bytes = es
    for d in range(1, <int>it.meta.shape.size()):
        row_bytes *= <size_t>it.meta.shape[d]
    # allgather and alltoall: the first dimension is this rank's own, not the response's
    if c == C_ALLGATHER and req != NULL:
        rows = req.meta.shape[0] if req.meta.shape.size() else 1
        if node != NULL:
            err = shm_allgather(node, req.input, rows, row_bytes, &req.result, &req.result_rows,
                                req.result_splits, it.hit, req.output, req.output_bytes)
        else:
            err = _allgather(comm, req.input, rows, row_bytes, &req.result, &req.result_rows,
                             req.result_splits, it.hit, req.output, req.output_bytes)
        req.result_rows *= <int64_t>row_bytes
    elif c == C_BROADCAST and req != NULL:
        if req.output == NULL and item_count(it.meta):
            return nomem(item_count(it.meta) * es)
        if rank == it.meta.root and req.output != req.input:
            memcpy(req.output, req.input, item_count(it.meta) * es)
        if node != NULL and item_count(it.meta) * es < SHM_COPY_MAX:
            err = shm_broadcast(node, req.output, item_count(it.meta) * es, it.meta.root)
        else:
            err = run_broadcast(comm, req.output, item_count(it.meta) * es, it.meta.root)
    elif c == C_ALLTOALL and req != NULL:
        splits = req.splits
        rows = req.meta.shape[0] if req.meta.shape.size() else 1
        if splits.empty():
            splits.assign(size, rows // size)
        err = HV_ERR_SHM
        if node != NULL:
            err = shm_alltoall(node, req.input, rows, splits, row_bytes, &req.result,
                               &req.result_splits, req.output, req.output_bytes)
        if err == HV_ERR_SHM:
            err = run_alltoall(comm, req.input, rows, splits, row_bytes, &req.result,
                               &req.result_splits, req.output, req.output_bytes)
        rows = 0
        for s in req.result_splits:
            rows += s
        req.result_rows = rows * <int64_t>row_bytes
    elif c == C_REDUCESCATTER and req != NULL:
        rows = it.meta.shape[0] if it.meta.shape.size() else 1
        err = HV_ERR_SHM
        if node != NULL:
            err = shm_reducescatter(node, req.input, req.output, rows, row_bytes // es,
                                    it.meta.dtype, it.meta.op)
        if err == HV_ERR_SHM:
            err = run_reducescatter(comm, req.input, req.output, rows, row_bytes // es,
                                    it.meta.dtype, it.meta.op)
    elif c == C_JOIN and req != NULL:
        req.value = it.value
    if req != NULL and req.output != NULL and req.result == req.output:
        req.result = NULL           # the caller's own array, written in place: never freed here
        req.result_given = True
    return err
