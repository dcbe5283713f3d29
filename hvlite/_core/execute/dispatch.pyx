"""Algorithm dispatch on a Context: picks the algorithm ("auto": the cost model proposes, the
job's first calls of each size class decide, tuning/calibrate.pyx) and runs it."""
from libc.stdlib cimport free, calloc
from libc.stdint cimport uint64_t
from posix.mman cimport munmap
from libc.string cimport memcpy
from libc.stdio cimport fprintf, stderr
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.kernels.reduce cimport kernel_op, finish_op
from hvlite._core.algorithms.algorithm cimport allreduce_fn
from hvlite._core.codes cimport HV_ERR_SHM
from hvlite._core.tuning.cost_model cimport *
from hvlite._core.tuning.cost_model import complete
from hvlite._core.codes cimport *
from hvlite._core.algorithms.ring cimport ring_allreduce, ring_allreduce_from
from hvlite._core.algorithms.rhd cimport rhd_allreduce, rhd_allreduce_from
from hvlite._core.algorithms.rd cimport rd_allreduce
from hvlite._core.algorithms.tree cimport tree_allreduce
from hvlite._core.algorithms.hierarchical cimport hierarchical_allreduce
from hvlite._core.algorithms.mpiref cimport mpi_allreduce
from hvlite._core.algorithms.adasum cimport adasum_allreduce
from hvlite._core.tuning.calibrate cimport (Calibration, CAL_CLASSES, CAL_SLOTS, CAL_LOW, CAL_MAX_CANDIDATES,
                                     size_class, cal_init, cal_begin, cal_next, cal_kept, cal_done,
                                     cal_credit, cal_may_time,
                                     cal_neighbour, cal_lost)
from hvlite._core.shm.segment cimport (ShmPiece, shm_open_area, shm_close_area, shm_allreduce,
                               shm_allreduce_pieces, shm_set_why, shm_barrier_seconds)
from hvlite._core.shm.cma cimport (shm_direct_allreduce, direct_probe, direct_worth, ptracer_hold,
                                  ptracer_release, OutMap)

cdef extern from "stdlib.h" nogil:
    void* aligned_alloc(size_t alignment, size_t size)


cdef allreduce_fn _flat_fn(int algo) noexcept nogil:
    if algo == ALG_RING:
        return ring_allreduce
    if algo == ALG_RHD:
        return rhd_allreduce
    if algo == ALG_RD:
        return rd_allreduce
    return tree_allreduce


cdef allreduce_fn _cross_fn(Context* c, size_t nbytes) noexcept nogil:
    """The algorithm among the nodes, chosen from what every rank that runs it shares: one
    segment's slice when nodes are equal, else the segment the leaders reduce."""
    if c.nodes <= 1:
        return NULL
    if nbytes > c.shm.seg:
        nbytes = c.shm.seg
    if c.uniform:
        nbytes //= c.local_size
    return _flat_fn(choose(<double>nbytes, c.nodes, 1, 1, True, False, &c.model))


cdef int context_init(Context* c, object comm, object local, object cross, bint uniform,
                      int nodes, size_t segment_bytes, dict model, tuple options) except -1:
    """options: see execute/dispatch.pxd. Collective over comm."""
    cdef int i, a
    c.outs = NULL
    c.stamps = False
    c.apart = False
    c.comm = (<MPI.Comm>comm).ob_mpi
    c.local = (<MPI.Comm>local).ob_mpi
    c.cross = (<MPI.Comm>cross).ob_mpi
    c.rank, c.size = comm.Get_rank(), comm.Get_size()
    c.local_size = local.Get_size()
    c.uniform, c.nodes = uniform, nodes
    c.model = complete(model)
    c.scratch.seg_bytes = (segment_bytes + 63) // 64 * 64
    c.scratch.divisor = 0
    c.scratch.buf = <char*>aligned_alloc(64, 2 * c.scratch.seg_bytes)
    if c.scratch.buf == NULL:
        raise MemoryError("hvlite: cannot allocate the scratch segments")
    from mpi4py.MPI import MIN, MAX
    enabled, seg, redundant_max, probe = options[:4]
    calibrate = options[4] if len(options) > 4 else 0
    direct = options[5] if len(options) > 5 else True
    ptracer = options[6] if len(options) > 6 else True
    cal_init(&c.cal, calibrate > 0, calibrate > 1, nodes)
    cal_init(&c.ways, calibrate > 0, calibrate > 1, nodes)
    c.ways.names, c.ways.who, c.ways.apart_text = HV_SHM_WAY_NAMES, b"the shared segment", b" in pieces"
    c.ways.warm = True
    cal_init(&c.ways_apart, calibrate > 0, calibrate > 1, nodes)
    c.ways_apart.names, c.ways_apart.who = HV_SHM_WAY_NAMES, b"the shared segment"
    c.ways_apart.apart_text, c.ways_apart.warm = b" out of place", True
    cal_init(&c.reads, calibrate > 0, calibrate > 1, nodes)
    c.reads.names, c.reads.who, c.reads.apart_text = (HV_SHM_WAY_NAMES, b"allgather's reads",
                                                      b" (alltoall)")
    c.reads.warm = True
    if redundant_max < 0:       # measured: with 2 ranks reducing both slots beats slicing
        redundant_max = (256 << 10) if local.Get_size() <= 2 else (16 << 10)
    shm_open_area(&c.shm, local, seg, redundant_max, enabled)
    # Slices must line up across nodes: one segment size and one verdict for the whole job.
    mine = c.shm.seg if c.shm.base != NULL else (1 << 62 if c.shm.L == 1 and enabled else 0)
    agreed = comm.allreduce(mine, op=MIN)
    c.shm_ok = agreed > 0
    c.direct_ok = False
    c.ptracer_held = False
    if c.shm_ok:
        c.shm.seg = agreed      # also on single-rank nodes: their segments must match the others'
        if probe:               # alpha_shm measured, the slowest node's, so auto agrees everywhere
            c.model.alpha_shm = comm.allreduce(shm_barrier_seconds(&c.shm, 200), op=MAX)
        if direct and nodes == 1 and c.shm.base != NULL:   # one node: the set is the node
            # least privilege under Yama: two ranks let in only each other
            import os
            pids = local.allgather(os.getpid()) if local.Get_size() == 2 else None
            ptracer_hold(ptracer, pids[1 - local.Get_rank()] if pids else 0)
            c.ptracer_held = True
            c.direct_ok = comm.allreduce(direct_probe(&c.shm), op=MIN) == 1
            if not c.direct_ok:
                ptracer_release()
                c.ptracer_held = False
    elif c.shm.base != NULL:
        shm_close_area(&c.shm)
        shm_set_why(&c.shm, "another node has no shared segment")
    c.model.shm_direct = c.direct_ok
    c.shm.direct = c.direct_ok      # allgather and alltoall read peers too (shm/copy.pyx)
    if c.direct_ok:
        _map_outputs(c, local)
    return 0


cdef void _map_outputs(Context* c, local):
    """Every node rank's output arena mapped here, so this rank writes its results into the
    peers' out-of-place outputs itself (a rank without one, or one it cannot map, gets the
    kernel's writes: nothing to agree on)."""
    import os
    from hvlite._core.shm.arena import shared, map_peer
    cdef int r
    a = shared()
    everyone = local.allgather((os.getpid(), a.fd, a.address, a.cap) if a is not None else None)
    c.outs = <OutMap*>calloc(c.local_size, sizeof(OutMap))
    if c.outs == NULL:
        return
    for r, peer in enumerate(everyone):
        if r != local.Get_rank() and peer is not None:
            c.outs[r].map = <char*><uint64_t>map_peer(peer[0], peer[1], peer[3])
            if c.outs[r].map != NULL:
                c.outs[r].base, c.outs[r].cap = peer[2], peer[3]
                c.outs[r].mapped = <unsigned char*>calloc((peer[3] >> 15) + 1, 1)  # a bit a page


cdef void context_free(Context* c) noexcept nogil:
    cdef int r
    free(c.scratch.buf)
    c.scratch.buf = NULL
    if c.outs != NULL:
        for r in range(c.local_size):
            if c.outs[r].map != NULL:
                munmap(c.outs[r].map, c.outs[r].cap)
            free(c.outs[r].mapped)
        free(c.outs)
        c.outs = NULL
    if c.ptracer_held:
        ptracer_release()
        c.ptracer_held = False
    shm_close_area(&c.shm)


cdef int auto_choice(Context* c, size_t nbytes, bint apart=False) noexcept nogil:
    cdef int pick = c.cal.pick[size_class(nbytes, apart)] if c.cal.enabled else -1
    if pick >= 0:
        return pick
    return choose(<double>nbytes, c.size, c.nodes, c.local_size, c.uniform, c.shm_ok, &c.model)


cdef bint carry_timed(Context* c, size_t nbytes, int algorithm, bint apart) noexcept nogil:
    return (algorithm == ALG_AUTO and cal_may_time(&c.cal, size_class(nbytes, apart))
            or c.direct_ok and c.ways.enabled and direct_worth(&c.shm, nbytes)
            and cal_may_time(_ways(c, False, apart), size_class(nbytes, apart)))


cdef str _cand_name(const Calibration* cal, int code):
    return (<bytes>cal.names[code]).decode()


cdef dict calibration_table(const Calibration* cal, bint apart=False):
    """{class size in bytes: {"pick", "at_bytes", "seconds": {candidate: s}, "calls": {candidate:
    trial calls}, "confirmed": the pick's last confirmed s or None, "redos": times measured
    again, "bar": how much faster than the model's choice another had to run, "challenges": times
    the runner-up ran again on the job's calls, "switches": times it ran faster and became the
    pick (its time then in "seconds"), "challenging": the runner-up running now or None}} for measured
    classes of calls in place (apart: of calls whose output is not their input; for the
    segment's ways, of fused batches). Candidates by name: algorithms, or ways."""
    out = {}
    cdef int k
    for j in range(CAL_CLASSES):
        k = j + (CAL_CLASSES if apart else 0)
        if cal.pick[k] < 0:
            continue
        out[1 << (j + CAL_LOW)] = {
            "pick": _cand_name(cal, cal.pick[k]), "at_bytes": int(cal.at_bytes[k]),
            "seconds": {_cand_name(cal, cal.cand[k][i]): cal.seconds[k][cal.cand[k][i]]
                        for i in range(cal.ncand[k]) if cal.seconds[k][cal.cand[k][i]] > 0},
            "calls": {_cand_name(cal, cal.cand[k][i]): cal.ntrial[k][i] for i in range(cal.ncand[k])},
            "confirmed": cal.confirmed[k] or None, "redos": cal.redos[k], "bar": cal.bar[k],
            "challenges": cal.challenges[k], "switches": cal.switches[k],
            "challenging": (_cand_name(cal, cal.cand[k][cal.challenger[k]])
                            if cal.challenger[k] >= 0 else None)}
    return out


cdef double SPREAD = 2.5        # candidates: the model's predictions within this x of its best
# Across nodes the model counts what each link carries (ring moves 1.5x the bytes the hierarchical
# exchange does over 2 hosts; its probes put both within 2% of their calls at 1 Gbit/s), and each
# trial of a loser costs milliseconds: rd at 2 MiB took 57 ms against shm's 21, and fp16's fused
# batches spread over several classes, so the trials of ring, rhd and rd were a tenth of a short
# job's first 20 steps (docs/benchmarks.md). There a candidate must be predicted within this.
cdef double CROSS_SPREAD = 1.4
cdef double LONE_SPREAD = 8.0   # one node, a lone candidate: the others within this x of it
cdef double LONE_CHEAP = 5e-4   # ... or predicted under this many seconds a call
cdef double LONE_BAR = 1.3      # ... and the model's own stays unless one ran this x faster


cdef int resolve_algorithm(Context* c, size_t nbytes, int algo, bint apart=False) noexcept nogil:
    cdef int cls, model, n = 0, a, near, second
    cdef double second_p
    cdef bint lone = False
    cdef int cand[CAL_MAX_CANDIDATES]
    cdef double pred[CAL_MAX_CANDIDATES]
    cdef double best, p, spread
    c.shm.credit = 0        # nothing of this call's rode yet (resolved_done)
    if algo != ALG_AUTO:
        return algo
    model = auto_choice(c, nbytes, apart)
    cls = size_class(nbytes, apart)
    if not c.cal.enabled or c.size <= 1:
        return model
    if c.cal.pick[cls] >= 0:
        a = cal_kept(&c.cal, cls, nbytes)   # confirmed (and challenged) now and then on the job's calls
        if a == ALG_SHM and c.cal.armed and _way_unsettled(c, nbytes, apart):
            c.cal.armed = 0     # this call measures the segment's ways: not shm's own time
        return a
    if c.cal.untimed:       # ranks out of step (the round went through rank 0): no trial now
        return model
    if c.cal.ncand[cls] == 0:
        # The candidates: what the model may choose here and predicts within SPREAD x of its
        # best (CROSS_SPREAD across nodes); across nodes less what lost in a class nearby, and
        # that class's pick (calibrate.pyx).
        best = predict(model, <double>nbytes, c.size, c.nodes, c.local_size, &c.model)
        near = cal_neighbour(&c.cal, cls) if c.nodes > 1 else -1
        spread = CROSS_SPREAD if c.nodes > 1 else SPREAD
        for a in range(ALG_COUNT):
            if n < CAL_MAX_CANDIDATES and eligible(a, c.nodes, c.local_size, c.uniform, c.shm_ok):
                p = predict(a, <double>nbytes, c.size, c.nodes, c.local_size, &c.model)
                if near >= 0 and a == c.cal.pick[near] or (
                        (a == model or p <= spread * best)
                        and not (near >= 0 and cal_lost(&c.cal, near, a))):
                    cand[n], pred[n] = a, p
                    n += 1
        if n == 1 and c.nodes == 1:
            # A model whose probes met a busy moment can leave one candidate that then runs
            # for good (shm at 64 KiB, 3.6x slower than ring in such a launch). On one node a
            # lone candidate is tried beside the others the model puts within LONE_SPREAD x
            # of it or whose calls it predicts under LONE_CHEAP seconds (a trial's cost), and
            # at least the runner-up: a gigabyte's tree or rd trials would cost whole steps.
            second, second_p = -1, 0.0
            for a in range(ALG_COUNT):
                if a != cand[0] and eligible(a, c.nodes, c.local_size, c.uniform, c.shm_ok):
                    p = predict(a, <double>nbytes, c.size, c.nodes, c.local_size, &c.model)
                    if n < CAL_MAX_CANDIDATES and (p <= LONE_SPREAD * best or p <= LONE_CHEAP):
                        cand[n], pred[n] = a, p
                        n += 1
                    elif second < 0 or p < second_p:
                        second, second_p = a, p
            if n == 1 and second >= 0:
                cand[1], pred[1] = second, second_p
                n = 2
            lone = True
        if n <= 1:
            a = cand[0] if n == 1 else model
            c.cal.pick[cls] = <signed char>a
            c.cal.at_bytes[cls] = <double>nbytes
            if near >= 0 and c.cal.verbose and c.rank == 0:
                fprintf(stderr, b"hvlite: auto at %.0f bytes%s: %s alone, the others over 1.5x "
                        b"its time at %.0f bytes\n", <double>nbytes,
                        b" out of place" if apart else b"", HV_ALGORITHM_NAMES[a],
                        c.cal.at_bytes[near])
            return a
        cal_begin(&c.cal, cls, nbytes, cand, pred, n)
        if lone:    # the model was sure: a challenger must win clearly, not by a trial's noise
            c.cal.bar[cls] = LONE_BAR
    a = cal_next(&c.cal, cls, nbytes)
    if a == ALG_SHM and _way_unsettled(c, nbytes, apart):
        c.cal.armed = 0     # this call measures the segment's ways; shm's own trials come after
    return a


cdef inline Calibration* _ways(Context* c, bint fused, bint apart) noexcept nogil:
    """Where the segment's ways are measured: batches of several tensors in c.ways' upper
    classes, lone buffers in place in its lower ones, lone buffers out of place in
    c.ways_apart's upper ones. Out of place the slots copy the result out once more and the
    direct way writes the peers' outputs in their arenas, so the two kinds rank the ways
    otherwise: at 16 MiB on 2 ranks the slots won the in-place trials in 8 launches of 8 (by
    1.15-1.4x), the direct way the out-of-place ones in 6. With one class the benchmark's
    shuffle decided which kind of call each way's trials ran."""
    return &c.ways_apart if apart and not fused else &c.ways


cdef bint _way_unsettled(Context* c, size_t nbytes, bint apart) noexcept nogil:
    """Whether the segment's way for such a single buffer is being measured or challenged:
    then a call of shm times the ways, not shm."""
    cdef int cls = size_class(nbytes, apart)
    cdef Calibration* w = _ways(c, False, apart)
    return (c.direct_ok and w.enabled and direct_worth(&c.shm, nbytes)
            and (w.pick[cls] < 0 or w.challenger[cls] >= 0))


cdef bint _way(Context* c, size_t nbytes, bint fused) noexcept nogil:
    """Whether this batch (fused: of several tensors, the same on every rank; else a lone
    buffer, out of place on some rank where c.apart says so) goes the direct way; timed when
    its class is being measured or confirmed (_way_done agrees the time).
    Direct reads skip two copies but the kernel walks the pages one by one; through the slots
    every byte is copied but stays in the cache. Here 1-4 MiB ran 2x faster through the slots
    and the fused 24 MB step (4 KiB pages) 1.3-1.6x, while large buffers in huge pages ran alike;
    on the machine the direct way was written on it won 1.6x at 16 MiB (docs/benchmarks.md).
    So each class measures both, direct first and kept on a tie (less memory traffic)."""
    c.shm.credit = 0
    if not c.direct_ok or not direct_worth(&c.shm, nbytes):
        return False
    return _direct_or_slots(_ways(c, fused, c.apart), nbytes, fused or c.apart)


cdef bint _direct_or_slots(Calibration* cal, size_t nbytes, bint upper) noexcept nogil:
    """Whether this call of a class that measures the direct way against the slots goes the
    direct way: the kept pick, or the next trial (direct first, kept on a tie); direct where
    nothing is measured."""
    cdef int cls
    cdef int cand[2]
    cdef double pred[2]
    if not cal.enabled:
        return True
    cls = size_class(nbytes, upper)
    if cal.pick[cls] >= 0:
        return cal_kept(cal, cls, nbytes) == WAY_DIRECT
    if cal.untimed:         # ranks out of step: no trial now
        return True
    if cal.ncand[cls] == 0:
        cand[0], cand[1] = WAY_DIRECT, WAY_SLOTS
        pred[0], pred[1] = 1.0, 2.0
        cal_begin(cal, cls, nbytes, cand, pred, 2)
    return cal_next(cal, cls, nbytes) == WAY_DIRECT


cdef bint read_way(Context* c, size_t nbytes, bint alltoall, bint could) noexcept nogil:
    """(dispatch.pxd) Reads skip a copy but the kernel walks and pins the sender's pages: on one
    2-core machine they ran allgather 1.4-1.8x faster from 64 KiB, on another 1.5-2.5x slower
    (docs/benchmarks.md). So each class measures both, direct first and kept on a tie."""
    if not c.direct_ok:
        return False
    return not could or _direct_or_slots(&c.reads, nbytes, alltoall)


cdef int read_way_done(Context* c, int err) noexcept nogil:
    if err:
        c.reads.armed = 0
        return err
    return cal_done(&c.reads, c.comm, &c.scratch)


cdef bint read_way_slots(Context* c, size_t nbytes, bint alltoall) noexcept nogil:
    cdef int cls = size_class(nbytes, alltoall)
    return (c.reads.enabled and c.reads.pick[cls] == WAY_SLOTS
            and c.reads.challenger[cls] < 0)


cdef int _way_done(Context* c, int err) noexcept nogil:
    """After a batch _way chose for, on every rank of the node alike (as resolved_done)."""
    if err:
        c.ways.armed = c.ways_apart.armed = 0
        return err
    # the slots' copy-in, if it rode with the vote, counts (resolved_done); auto may be timing
    # the same call (the segment's confirming window and shm's trials meet). At most one of the
    # two tables timed the call (_ways), the same on every rank.
    cdef Calibration* w = &c.ways_apart if c.ways_apart.armed else &c.ways
    cal_credit(w, c.shm.credit)
    return cal_done(w, c.comm, &c.scratch)


cdef int resolved_done(Context* c, int err) noexcept nogil:
    """After the call resolve_algorithm chose for (err: its outcome). A failed call is not timed:
    the agreement is collective, and a rank that failed alone (out of memory) must not wait in
    it while its peers wait in the algorithm."""
    if err:
        c.cal.armed = 0
        return err
    # Data that rode with the vote were copied into the slots before the timing began: that
    # copy is the shared segment's work and counts in its time, or shm looks a copy faster
    # than it runs (256 KiB on 2 ranks: its trials 19.6 us, its calls 34 us, while rhd's
    # trials, 25 us, held everything; coordinator._carry measures the copy).
    cal_credit(&c.cal, c.shm.credit)
    c.shm.credit = 0
    return cal_done(&c.cal, c.comm, &c.scratch)


cdef int run_allreduce(Context* c, char* buf, size_t count, int dtype, int op, int algo,
                       long divisor) noexcept nogil:
    cdef int kop = kernel_op(op)
    cdef int err = 0
    cdef double nbytes = <double>(count * dtype_size(dtype))
    cdef ShmPiece piece
    cdef allreduce_fn cross
    cdef long div = 1          # > 1: the shared segment divides an Average's chunks itself
    if count == 0:
        return 0
    if op == OP_ADASUM:
        return run_adasum(c, buf, &count, 1, dtype)
    if c.size > 1:
        if algo == ALG_MPI:
            err = mpi_allreduce(buf, count, dtype, kop, c.comm)
        elif (algo == ALG_SHM or algo == ALG_HIERARCHICAL) and c.shm_ok:
            # Within the node in shared memory; across nodes (if any) on each rank's slice.
            err = 1
            cross = _cross_fn(c, count * dtype_size(dtype))
            if op == OP_AVERAGE:       # the segment (or across nodes, the cross algorithm) divides
                div = divisor
            if _way(c, count * dtype_size(dtype), False):   # one node: the peers' buffers
                piece.input = piece.output = buf
                piece.start = 0
                piece.count = count
                err = shm_direct_allreduce(&piece, 1, count, dtype, kop, &c.shm, c.outs, div)
            if err == 1:
                err = shm_allreduce(buf, count, dtype, kop, &c.shm, c.cross, c.uniform, cross,
                                    &c.scratch, div)
            err = _way_done(c, err)
        elif algo == ALG_SHM:
            err = HV_ERR_SHM
        elif algo == ALG_HIERARCHICAL:
            # The cross-node algorithm must be the same on every rank that runs it, so it is
            # chosen from values all ranks share: the slice size when nodes are equal (then
            # local_size is the same everywhere), else the whole buffer the leaders reduce.
            if c.uniform:
                nbytes /= c.local_size
            err = hierarchical_allreduce(
                buf, count, dtype, kop, c.local, c.cross, c.uniform,
                _flat_fn(choose(nbytes, c.nodes, 1, 1, True, False, &c.model)), &c.scratch)
        else:
            if op == OP_AVERAGE:        # the algorithm divides each element where it finishes
                c.scratch.divisor = div = divisor
            err = _flat_fn(algo)(buf, count, dtype, kop, c.comm, &c.scratch)
            c.scratch.divisor = 0
    if err == 0 and div == 1:
        finish_op(buf, count, dtype, op, divisor)
    return err


cdef int run_allreduce_from(Context* c, const char* input, char* buf, size_t count, int dtype,
                            int op, int algo, long divisor) noexcept nogil:
    cdef int err
    cdef size_t es = dtype_size(dtype)
    if input == buf or count == 0 or op == OP_ADASUM or c.size <= 1 or not (
            algo == ALG_RING or algo == ALG_RHD):
        if input != buf and count:
            memcpy(buf, input, count * es)
        return run_allreduce(c, buf, count, dtype, op, algo, divisor)
    if op == OP_AVERAGE:                # the algorithm divides each element where it finishes
        c.scratch.divisor = divisor
    if algo == ALG_RING:
        err = ring_allreduce_from(input, buf, count, dtype, kernel_op(op), c.comm, &c.scratch)
    else:
        err = rhd_allreduce_from(input, buf, count, dtype, kernel_op(op), c.comm, &c.scratch)
    c.scratch.divisor = 0
    return err


cdef int run_adasum(Context* c, char* buf, const size_t* counts, size_t ntensors,
                    int dtype) noexcept nogil:
    """Adasum has one algorithm (algorithms/adasum.pyx), whatever `algorithm=` says: its dot products
    need whole tensors, which only its vector-halving exchange keeps track of."""
    return adasum_allreduce(buf, counts, ntensors, dtype, c.comm)


cdef bint pieces_in_segment(Context* c, int algorithm) noexcept nogil:
    """Fused batches of this algorithm go through the node's shared segment piece by piece."""
    return (c.nodes == 1 and c.shm_ok and c.shm.L > 1
            and (algorithm == ALG_SHM or algorithm == ALG_AUTO))


cdef int run_allreduce_pieces(Context* c, const ShmPiece* pieces, size_t npieces, size_t count,
                              int dtype, int op, long divisor, bint fused) noexcept nogil:
    """Each piece's input reduced into its output through the shared segment (no packing):
    straight from the peers' buffers where the node allows it, else through the slots."""
    cdef int err = 1
    cdef long div = divisor if op == OP_AVERAGE else 1     # one node: the segment divides
    if _way(c, count * dtype_size(dtype), fused):
        err = shm_direct_allreduce(pieces, npieces, count, dtype, kernel_op(op), &c.shm, c.outs,
                                   div)
    if err == 1:
        err = shm_allreduce_pieces(pieces, npieces, count, dtype, kernel_op(op), &c.shm, div)
    err = _way_done(c, err)
    cdef size_t k
    if err == 0 and div == 1:
        for k in range(npieces):
            if pieces[k].output != NULL:
                finish_op(pieces[k].output, pieces[k].count, dtype, op, divisor)
    return err
