"""Tensor fusion: ready all-reduces that share dtype, op and algorithm are packed into one
buffer up to HVLITE_FUSION_THRESHOLD bytes, reduced once, and unpacked (Adasum batches carry their
tensors' boundaries along: each tensor gets its own dot products). A batch of one skips the
buffer and reduces in the output itself, and so does every tensor of at least
HVLITE_FUSION_TENSOR_LIMIT bytes: fusing it saves one latency but costs two passes over its
memory (measured: 220-tensor step 0.78x MPI fusing everything, see README). The batches follow
item order, identical on every rank.

On one node with a shared segment a batch never touches the fusion buffer: segment by segment,
the tensors' inputs are gathered straight into this rank's slot and the reduced result scattered
straight into their outputs (shm/segment.pyx), so fusing costs no copy and large tensors fuse too.
"""
# distutils: language = c++
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from libc.stdint cimport int64_t
from libcpp.vector cimport vector
from hvlite._core.request cimport *
from hvlite._core.codes cimport *
from hvlite._core.request cimport hv_now
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.kernels.reduce cimport fill_identity
from hvlite._core.codes cimport ALG_SHM
from hvlite._core.shm.segment cimport ShmPiece
from hvlite._core.execute.context cimport Context
from hvlite._core.execute.dispatch cimport (pieces_in_segment, resolve_algorithm, resolved_done,
                                    run_adasum, run_allreduce, run_allreduce_from,
                                    run_allreduce_pieces)


cdef void fusion_free(FusionBuffer* f) noexcept nogil:
    free(f.buf)
    f.buf = NULL
    f.cap = 0


cdef size_t _alloc_limit = <size_t>-1     # tests: fused buffers past this fail, as malloc may


def _test_alloc_limit(size_t nbytes):
    """Tests only: a fusion buffer of more than `nbytes` fails to allocate on this rank, as it
    would under a memory cap, whatever size the round's batch happens to have."""
    global _alloc_limit
    _alloc_limit = nbytes


cdef int _reserve(FusionBuffer* f, size_t nbytes) noexcept nogil:
    if nbytes <= f.cap:
        return 0
    free(f.buf)
    f.buf = <char*>malloc(nbytes) if nbytes <= _alloc_limit else NULL
    f.cap = nbytes if f.buf != NULL else 0
    return 0 if f.buf != NULL else -1


cdef int _reduce(Context* c, char* buf, size_t total, int dtype, int op, int algo, long divisor,
                 vector[Item]& items, vector[size_t]& batch) noexcept nogil:
    """One batch's reduction: Adasum takes the tensors' boundaries (each tensor gets its own dot
    products), the other ops see one buffer."""
    cdef vector[size_t] counts
    cdef size_t k
    if op != OP_ADASUM:
        return run_allreduce(c, buf, total, dtype, op, algo, divisor)
    for k in batch:
        counts.push_back(item_count(items[k].meta))
    return run_adasum(c, buf, counts.data(), counts.size(), dtype)


cdef int _run_batch(Context* c, FusionBuffer* f, vector[Item]& items, vector[size_t]& batch,
                    long divisor) noexcept nogil:
    """One batch; if auto's choice for it was one of a size class's trials, its time is
    agreed and recorded afterwards, on every path (dispatch.resolved_done), unless it failed."""
    cdef int err
    # a lone tensor out of place on some rank (the agreed flag): the segment's ways are timed
    # apart for those, whichever path this rank's own buffers take (dispatch._ways)
    c.apart = batch.size() == 1 and items[batch[0]].meta.apart
    err = _run_batch_on(c, f, items, batch, divisor)
    c.apart = False
    return resolved_done(c, err)


cdef int _run_batch_on(Context* c, FusionBuffer* f, vector[Item]& items, vector[size_t]& batch,
                       long divisor) noexcept nogil:
    cdef Item* it = &items[batch[0]]
    cdef int dtype = it.meta.dtype, op = it.meta.op, err, algo
    cdef bint adasum = op == OP_ADASUM
    cdef size_t es = dtype_size(dtype), total = 0, off = 0, n, k
    cdef char* buf
    cdef double t0 = hv_now() if c.stamps else 0, t1, t2
    for k in batch:
        total += item_count(items[k].meta)
        items[k].start = t0
        items[k].fused = <int>batch.size()
    # Straight through the shared segment: the gather is the only copy in, the scatter the
    # only copy out, so auto takes it for every fused batch on one node (a lone tensor goes
    # where auto's measurements say).
    if not adasum and pieces_in_segment(c, it.meta.algorithm) and batch.size() > 1:
        return _run_through_segment(c, items, batch, total, divisor, t0)
    # Adasum runs its own algorithm (recorded as auto, the only algorithm it is submitted with).
    # a lone tensor whose output is apart from its input (on any rank: the agreed meta says)
    # is timed in classes of its own
    algo = ALG_AUTO if adasum else resolve_algorithm(c, total * es, it.meta.algorithm,
                                                     batch.size() == 1 and it.meta.apart)
    # A lone tensor reduced in place runs the segment's in-place all-reduce instead, which
    # copies in only the slices the others reduce and out only theirs (1 MiB, 2 ranks: 190 us
    # against 450 us through the pieces).
    if (not adasum and pieces_in_segment(c, it.meta.algorithm) and algo == ALG_SHM
            and (it.req == NULL or it.req.output != it.req.input)):
        return _run_through_segment(c, items, batch, total, divisor, t0)
    if batch.size() == 1:
        if it.req != NULL:
            buf = it.req.output
            if adasum:
                if it.req.output != it.req.input and total:
                    memcpy(it.req.output, it.req.input, total * es)
                err = _reduce(c, buf, total, dtype, op, algo, divisor, items, batch)
            else:       # out of place, ring and rhd read the input as they go
                err = run_allreduce_from(c, it.req.input, buf, total, dtype, op, algo, divisor)
        else:
            buf = <char*>malloc(total * es + 1)
            if buf == NULL:
                return nomem(total * es + 1)
            fill_identity(buf, total, dtype, op)
            err = _reduce(c, buf, total, dtype, op, algo, divisor, items, batch)
        it.packed = t0
        it.ran = it.unpacked = hv_now() if c.stamps else 0
        if it.req == NULL:
            free(buf)
        else:
            it.req.algorithm_used = algo
        return err
    if _reserve(f, total * es):
        return nomem(total * es)
    for k in batch:
        n = item_count(items[k].meta)
        if items[k].req != NULL:
            memcpy(f.buf + off * es, items[k].req.input, n * es)
        else:
            fill_identity(f.buf + off * es, n, dtype, op)
        off += n
    t1 = hv_now() if c.stamps else 0
    err = _reduce(c, f.buf, total, dtype, op, algo, divisor, items, batch)
    t2 = hv_now() if c.stamps else 0
    off = 0
    for k in batch:
        n = item_count(items[k].meta)
        if items[k].req != NULL and not err:
            memcpy(items[k].req.output, f.buf + off * es, n * es)
            items[k].req.algorithm_used = algo
        off += n
    t0 = hv_now() if c.stamps else 0
    for k in batch:
        items[k].packed = t1
        items[k].ran = t2
        items[k].unpacked = t0
    return err


cdef int _run_through_segment(Context* c, vector[Item]& items, vector[size_t]& batch, size_t total,
                              long divisor, double t0) noexcept nogil:
    cdef int dtype = items[batch[0]].meta.dtype, op = items[batch[0]].meta.op
    cdef vector[ShmPiece] pieces
    cdef ShmPiece piece
    cdef size_t off = 0, k
    cdef double t1
    for k in batch:
        piece.count = item_count(items[k].meta)
        piece.start = off
        piece.input = items[k].req.input if items[k].req != NULL else NULL
        piece.output = items[k].req.output if items[k].req != NULL else NULL
        pieces.push_back(piece)
        off += piece.count
    cdef int err = run_allreduce_pieces(c, pieces.data(), pieces.size(), total, dtype, op,
                                        divisor, batch.size() > 1)
    for k in batch:
        if items[k].req != NULL and not err:
            items[k].req.algorithm_used = ALG_SHM
    t1 = hv_now() if c.stamps else 0
    for k in batch:             # packing, reduction and unpacking are one pipelined pass
        items[k].packed = t0
        items[k].ran = t1
        items[k].unpacked = t1
    return err


cdef void run_allreduces(Context* c, FusionBuffer* f, vector[Item]& items, long divisor) noexcept nogil:
    _run_allreduces(c, f, items, divisor, f.used, f.batch)


cdef void _run_allreduces(Context* c, FusionBuffer* f, vector[Item]& items, long divisor,
                          vector[char]& used, vector[size_t]& batch) noexcept nogil:
    """(used, batch: the buffer's own lists, kept from round to round)"""
    cdef size_t i, j, k, es, nbytes, batch_bytes
    cdef bint large_alone
    cdef int err
    used.assign(items.size(), 0)
    for i in range(items.size()):
        if used[i] or items[i].meta.collective != C_ALLREDUCE or items[i].ride >= 0:
            continue
        # Gather every later item of the same kind, in order, into threshold-sized batches.
        batch.clear()
        batch_bytes = 0
        es = dtype_size(items[i].meta.dtype)
        # Through the shared segment, packing is the copy the collective makes anyway, so
        # large tensors fuse for free.
        large_alone = (items[i].meta.op == OP_ADASUM
                       or not pieces_in_segment(c, items[i].meta.algorithm))
        for j in range(i, items.size()):
            if used[j] or items[j].meta.collective != C_ALLREDUCE or items[j].ride >= 0:
                continue
            if (items[j].meta.dtype != items[i].meta.dtype or items[j].meta.op != items[i].meta.op
                    or items[j].meta.algorithm != items[i].meta.algorithm):
                continue
            nbytes = item_count(items[j].meta) * es
            if nbytes >= f.tensor_limit and large_alone:
                if j != i:
                    continue    # it gets a batch of its own when the outer loop reaches it
                batch.push_back(j)
                used[j] = 1
                break
            if batch.size() and batch_bytes + nbytes > f.threshold:
                err = _run_batch(c, f, items, batch, divisor)
                for k in batch:
                    items[k].err = err
                if err == HV_ERR_NOMEM:
                    return      # this rank failed alone: the round ends (coordinator._fail_here)
                batch.clear()
                batch_bytes = 0
            batch.push_back(j)
            batch_bytes += nbytes
            used[j] = 1
        err = _run_batch(c, f, items, batch, divisor)
        for k in batch:
            items[k].err = err
        if err == HV_ERR_NOMEM:
            return
