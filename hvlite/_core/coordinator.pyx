"""The background coordinator: one thread per runtime that negotiates, fuses and runs every
queued collective, the only thread that calls MPI for queued work, never holding the GIL.

A round, on every rank, whenever it has work pending (an idle coordinator sleeps on a condition
variable until work is submitted, waking every few ms up to 50 ms to answer liveness pings, so
idle processes use no measurable CPU; a peer that waits in a round pings it, and it joins that
round: see liveness.pyx):
  1. drain the queue; each request is a cache hit (its slot's bit) or a miss (to send rank 0);
  2. one all-reduce (BAND) of [ready bits | still-valid bits | flags] (transport.pyx);
  3. if a rank has cache misses, is stopping, or reports a stall (stall.pyx): a gather of the
     misses to rank 0, whose controller (controller.pyx) answers for all in one broadcast;
     the bytes both ways are wire.pyx's;
  4. run the ready list -- cached slots in slot order, then rank 0's answers -- the same on
     every rank: all-reduces fused (fusion.pyx), the rest through mpi_collectives.pyx;
  5. complete handles.
While work stays pending, rounds are at least HVLITE_CYCLE_TIME apart, so tensors submitted
meanwhile fuse into the next round; an idle coordinator starts a round at once on submit.
Every wait of this thread polls its liveness watch: a peer that stops answering ends the
coordinator with a LostRankError naming it and what was in flight.
"""
# distutils: language = c++
from cython.operator cimport dereference as deref
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy
from libc.stdint cimport int64_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from libcpp.unordered_set cimport unordered_set
cimport numpy as cnp
from mpi4py.libmpi cimport *
from hvlite._core.request cimport *
from hvlite._core.codes cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.dispatch cimport Context, context_init, context_free
from hvlite._core.cache cimport *
from hvlite._core.wire cimport *
from hvlite._core.table cimport Table
from hvlite._core.controller cimport table_init, controller_respond
from hvlite._core.stall cimport Stall, stall_init, stall_due
from hvlite._core.transport cimport transport_agree, transport_gather, transport_bcast
from hvlite._core.describe cimport int_to_str, code_name
from hvlite._core.fusion cimport Item, FusionBuffer, fusion_free, run_allreduces, item_count
from hvlite._core.mpi_collectives cimport *
from hvlite._core.trace cimport Recorder, TEvent, rec_init, rec_push, make_writer, K_CYCLE
from hvlite._core.autotune cimport Tuner, tune_init, tune_start, tune_round, tune_window_reset
from hvlite._core.pending cimport Pending, make_pending
from hvlite._core.codes cimport error_text
from cpython.ref cimport Py_REFCNT
cimport mpi4py.MPI as MPI
from hvlite._core.liveness cimport (Watch, watch_init, watch_free, watch_bind, watch_poll,
                                    watch_ping_all, watch_quiesce)

cnp.import_array()

cdef extern from "<algorithm>" namespace "std" nogil:
    void sort[Iter, Compare](Iter first, Iter last, Compare comp)


cdef bint _submitted_before(Request* a, Request* b) noexcept nogil:
    return a.submitted < b.submitted


cdef class Coordinator:
    cdef Context ctx
    cdef hv_monitor qmon          # queue, in-flight names, stop flag, death
    cdef hv_monitor dmon          # completions
    cdef vector[Request*] queue
    cdef unordered_set[string] inflight
    cdef bint stop_requested
    cdef readonly bint dead
    cdef string dead_reason
    cdef int dead_kind
    # coordinator-thread state
    cdef unordered_map[string, Request*] pending
    cdef vector[int] invalid_slots
    cdef Cache cache
    cdef Table table
    cdef FusionBuffer fusion
    cdef bint joined
    cdef int njoined
    cdef int64_t clock
    cdef Stall stall
    cdef double cycle_time
    # statistics
    cdef readonly int64_t rounds, slow_rounds
    cdef readonly double negotiate_seconds
    cdef readonly double own_seconds      # negotiation minus time spent inside MPI
    cdef Recorder rec
    cdef Tuner tune
    cdef Watch watch
    cdef bint stopped_together    # the last round stopped every rank (stop or fatal stall)
    cdef vector[int] granks       # the set's global ranks, for messages
    cdef string doing             # what this thread waits on now, for a lost-rank message
    # user-thread side (under the GIL): every Pending whose request may still be in flight
    cdef list live
    cdef Py_ssize_t since_sweep

    def __cinit__(self):
        hv_monitor_init(&self.qmon)
        hv_monitor_init(&self.dmon)
        self.ctx.scratch.buf = NULL
        self.fusion.buf = NULL
        self.fusion.cap = 0
        rec_init(&self.rec)
        tune_init(&self.tune)
        watch_init(&self.watch, MPI_COMM_NULL, 0, 0)

    def __init__(self, comm, local, cross, bint uniform, int nodes, size_t segment_bytes,
                 dict cost_model, double cycle_time, size_t fusion_threshold, int cache_capacity,
                 double stall_check, double stall_shutdown, size_t fusion_tensor_limit,
                 tuple shm=(False, 0, 0, False), control=None, ranks=None,
                 double lost_after=5.0, double ping_after=0.25):
        """`control`: a communicator of the set for liveness pings only (None: no watch, a
        missing rank is waited for without limit); `ranks`: the set's global ranks."""
        context_init(&self.ctx, comm, local, cross, uniform, nodes, segment_bytes, cost_model, shm)
        if control is not None:
            watch_init(&self.watch, (<MPI.Comm>control).ob_mpi, ping_after, lost_after)
        for r in (ranks if ranks is not None else range(self.ctx.size)):
            self.granks.push_back(int(r))
        self.fusion.threshold = fusion_threshold
        self.fusion.tensor_limit = fusion_tensor_limit
        cache_init(&self.cache, cache_capacity)
        table_init(&self.table, self.ctx.size)
        self.cycle_time = cycle_time
        stall_init(&self.stall, stall_check, stall_shutdown, hv_now())
        self.live = []
        self.since_sweep = 0

    def __dealloc__(self):
        watch_free(&self.watch)
        context_free(&self.ctx)
        fusion_free(&self.fusion)
        hv_monitor_destroy(&self.qmon)
        hv_monitor_destroy(&self.dmon)

    # ---- user-thread side -------------------------------------------------------------------

    def submit(self, name, int collective, int dtype, int op, int root, int algorithm, shape,
               cnp.ndarray inp, cnp.ndarray out, splits=None, error=None):
        """Queue one collective; returns a Pending. Returns (kind, message) instead for a name
        already in flight or a stopped coordinator (the caller raises codes.exception of it).
        A name still in flight only because its handle was dropped (an exception between submit
        and synchronize, say) is waited for first: the next step may reuse its names."""
        cdef string cname = name.encode()
        cdef vector[int64_t] cshape = [int(d) for d in shape]
        cdef vector[int64_t] csplits = [int(v) for v in splits] if splits is not None else []
        cdef string cerror = error.encode() if error else b""
        cdef Request* req
        cdef int problem = 0
        cdef Pending p
        for attempt in range(2):
            hv_lock(&self.qmon)
            problem = 1 if self.dead else (2 if self.inflight.count(cname) else 0)
            hv_unlock(&self.qmon)
            if problem != 2 or attempt:
                break
            p = self._dropped(cname)
            if p is None:
                break
            p.wait()
        if problem == 0:
            req = new Request()
            req.name = cname
            req.meta.collective = collective
            req.meta.dtype = dtype
            req.meta.op = op
            req.meta.root = root
            req.meta.algorithm = algorithm
            req.meta.shape = cshape
            req.meta.error = cerror
            req.input = <char*>cnp.PyArray_DATA(inp) if inp is not None else NULL
            req.output = <char*>cnp.PyArray_DATA(out) if out is not None else NULL
            req.splits = csplits
            req.status = ST_PENDING
            req.slot = -1
            req.submitted = hv_now()
            hv_lock(&self.qmon)
            if self.dead:
                problem = 1
            elif self.inflight.count(cname):    # another thread took the name meanwhile
                problem = 2
            else:
                self.inflight.insert(cname)
                self.queue.push_back(req)
                hv_notify_all(&self.qmon)
            hv_unlock(&self.qmon)
            if problem:
                del req
        if problem == 1:
            return (self.dead_kind, self.dead_reason.decode("utf-8", "replace"))
        if problem == 2:
            return (E_INVALID, f"a collective named {name!r} is already in flight on this rank; "
                               "synchronize it first or use another name")
        p = make_pending(req, &self.dmon, self, (inp, out))
        self._track(p)
        return p

    cdef Pending _dropped(self, const string& name):
        """The pending request named `name` whose handle is gone (only this list holds it)."""
        for q in self.live:
            # references: the list's and this loop's; a live handle would add its own
            if Py_REFCNT(q) == 2 and (<Pending>q).pending() and (<Pending>q).req.name == name:
                return <Pending>q
        return None

    cdef _track(self, Pending p):
        """Hold `p` (and so its buffers) until its request completes. Completed ones are swept
        out every 64 submits, so a dropped handle's buffers outlive their request by at most
        64 submits; the scan costs O(in flight / 64) per submit."""
        cdef list old
        self.live.append(p)
        self.since_sweep += 1
        if self.since_sweep >= 64:
            self.since_sweep = 0
            old = self.live
            # the new list is in place before any Pending is released: a finalizer that
            # submits again appends to it, not to the list being dropped
            self.live = [q for q in old if (<Pending>q).pending()]
            old = None

    def in_flight(self):
        """This rank's requests not yet completed (handles dropped or not), oldest first."""
        return [q for q in self.live if (<Pending>q).pending()]

    def wait_all(self):
        """Wait for every request this rank submitted (join, removing a set)."""
        for q in self.in_flight():
            q.wait()

    def release_all(self):
        """After the thread has stopped (every request completed): let go of them all."""
        self.live = []

    def stop(self):
        hv_lock(&self.qmon)
        self.stop_requested = True
        hv_notify_all(&self.qmon)
        hv_unlock(&self.qmon)

    def quiesced(self):
        """Whether the liveness communicator is empty (the coordinator stopped together with
        its peers): only then may it be freed, or a late ping would land in a later
        communicator that MPI gives the same context."""
        return self.watch.quiet

    def death(self):
        """(kind, reason) once the coordinator has stopped, else None."""
        if not self.dead:
            return None
        return (self.dead_kind, self.dead_reason.decode("utf-8", "replace"))

    def configure(self, fusion_threshold=None, cycle_time=None, fusion_tensor_limit=None):
        """Change tuning settings. Every rank must make the same change while no collective is in
        flight (between steps, after a barrier), or batches would differ across ranks."""
        hv_lock(&self.qmon)
        if fusion_threshold is not None:
            self.fusion.threshold = fusion_threshold
        if cycle_time is not None:
            self.cycle_time = cycle_time
        if fusion_tensor_limit is not None:
            self.fusion.tensor_limit = fusion_tensor_limit
        hv_unlock(&self.qmon)

    def writer(self):
        """The timeline writer bound to this coordinator's recorder."""
        return make_writer(&self.rec)

    def autotune(self, thresholds=(1 << 20, 4 << 20, 16 << 20, 64 << 20),
                 cycles_ms=(0.25, 1.0, 2.5, 5.0), warmup_rounds=20, window_rounds=60,
                 window_seconds=0.5, log_path=None):
        """Start tuning the fusion threshold and cycle time. Call it on every rank with the same
        arguments, between steps; rank 0 runs the trials and every rank applies its choices."""
        cdef vector[size_t] ts
        cdef vector[double] cs
        for t in thresholds:
            for c in cycles_ms:
                ts.push_back(t)
                cs.push_back(c / 1000.0)
        cdef string path = (log_path or "").encode() if self.ctx.rank == 0 else b""
        hv_lock(&self.qmon)
        tune_start(&self.tune, ts, cs, warmup_rounds, window_rounds, window_seconds, path)
        hv_unlock(&self.qmon)

    def autotune_state(self):
        """Rank 0's view: trial index, frozen, and the setting in force."""
        return {"on": self.tune.on, "frozen": self.tune.frozen, "trial": self.tune.trial,
                "trials": <int>self.tune.thresholds.size(),
                "fusion_threshold": self.fusion.threshold, "cycle_time_ms": self.cycle_time * 1e3}

    cdef void _tune_apply(self, int64_t threshold, int64_t cycle_ns) noexcept nogil:
        """Every rank, at the same round: the setting rank 0 published takes effect."""
        hv_lock(&self.qmon)
        self.fusion.threshold = <size_t>threshold
        self.cycle_time = cycle_ns * 1e-9
        hv_unlock(&self.qmon)
        tune_window_reset(&self.tune)

    def cache_slots(self):
        """{name: slot} of the response cache (read it while no collective is in flight)."""
        return {self.cache.names[s].decode(): s for s in range(self.cache.capacity)
                if not self.cache.names[s].empty()}

    def stats(self):
        return {"rounds": self.rounds, "slow_rounds": self.slow_rounds,
                "negotiate_seconds": self.negotiate_seconds, "own_seconds": self.own_seconds,
                "cached_names": self.cache.slot_of.size()}

    def run(self):
        """The thread body: the loop runs without the GIL until the coordinator stops."""
        with nogil:
            self._loop()

    # ---- coordinator thread -----------------------------------------------------------------

    cdef void _loop(self) noexcept nogil:
        cdef vector[Request*] fresh
        cdef bint stopping
        cdef double start, remaining
        watch_bind(&self.watch)
        while True:
            hv_lock(&self.qmon)
            self._idle()
            fresh.swap(self.queue)
            stopping = self.stop_requested
            hv_unlock(&self.qmon)
            self._intake(fresh)
            fresh.clear()
            start = hv_now()
            if self._round(stopping):
                if self.stopped_together:
                    watch_quiesce(&self.watch)
                return
            if not self.pending.empty() and self.cycle_time > 0:
                remaining = start + self.cycle_time - hv_now()
                if remaining > 0:
                    hv_lock(&self.qmon)
                    if not self.stop_requested:
                        hv_wait(&self.qmon, remaining)
                    hv_unlock(&self.qmon)

    cdef void _idle(self) noexcept nogil:
        """(qmon held) Sleep until work is queued, a stop is asked for, or a peer pings for a
        round this rank has not joined; the sleep is woken at once by a submit, and otherwise
        polls the liveness watch at intervals doubling from 1 to 50 ms."""
        cdef double pause = 1e-3
        while self.queue.empty() and self.pending.empty() and not self.stop_requested:
            if self.watch.ctl == MPI_COMM_NULL:
                hv_wait(&self.qmon, -1)
                continue
            if self.watch.wanted > self.watch.clock:
                return
            hv_wait(&self.qmon, pause)
            if not (self.queue.empty() and self.pending.empty() and not self.stop_requested):
                return          # woken for work: no MPI call stands between a submit and its round
            hv_unlock(&self.qmon)
            watch_poll(&self.watch, 0.0)
            hv_lock(&self.qmon)
            pause = pause * 2 if pause < 25e-3 else 50e-3

    cdef void _intake(self, vector[Request*]& fresh) noexcept nogil:
        cdef int slot
        for req in fresh:
            if req.meta.collective == C_JOIN:
                self.joined = True
            slot = cache_lookup(&self.cache, req.name, req.meta)
            if slot <= -2:      # cached, but this rank's metadata changed: everyone drops it
                self.invalid_slots.push_back(-2 - slot)
                slot = -1
            req.slot = slot if cacheable(req.meta.collective) else -1
            req.sent = False
            self.pending[req.name] = req

    cdef int _round(self, bint stopping) noexcept nogil:
        """One negotiation round; returns 1 when the coordinator must stop."""
        cdef int W = (self.cache.capacity + 63) // 64, err, finish = 0
        cdef vector[uint64_t] bits
        cdef vector[Item] items
        cdef double t0 = hv_now(), t1, ready
        cdef uint64_t flags
        self._vote(bits, W, stopping, t0)
        self.own_seconds += hv_now() - t0
        self._doing_round()
        self.watch.negotiating = True
        if stopping or not (bits_flags(bits, W) & FLAG_NO_STALL):
            watch_ping_all(&self.watch)     # everyone into this round now: a stop, a stall report
        err = transport_agree(self.ctx.comm, bits)
        t1 = hv_now()
        if err:
            self._die_err(b"negotiation failed: ", err)
            return 1
        self.clock += 1
        self.watch.clock = self.clock
        self.watch.negotiating = False
        self.rounds += 1
        flags = bits_flags(bits, W)
        self._cached(bits, W, not (flags & FLAG_ALL_JOINED), items)
        self.own_seconds += hv_now() - t1
        if (flags & SLOW_FLAGS) != SLOW_FLAGS:
            finish = self._slow(items, not (flags & FLAG_NOT_STOPPING), not (flags & FLAG_NO_STALL))
            if self.dead:       # the gather or broadcast failed: everything has failed already
                return 1
        ready = hv_now()
        self.negotiate_seconds += ready - t0
        self._run_ready(items, finish != 2, t0, ready)
        if self.watch.lost >= 0:
            self._die_err(b"", HV_ERR_LOST)
            return 1
        if finish:
            self.stopped_together = True
            self._die(E_SHUTDOWN if finish == 1 else E_STALL, self.dead_reason.c_str(), 0)
            return 1
        return 0

    cdef void _vote(self, vector[uint64_t]& bits, int W, bint stopping, double now) noexcept nogil:
        """This rank's part of the round's all-reduce: its ready slots, the slots it found stale,
        and its flags (misses, stopping, stall report wanted, joined, autotune)."""
        cdef bint misses = False, stall
        cdef double oldest = now
        cdef Request* req
        cdef int s
        bits_reset(bits, W)
        for kv in self.pending:
            req = kv.second
            if req.slot >= 0 and self.njoined and not self.joined and req.meta.collective != C_ALLREDUCE:
                req.slot = -1       # rank 0 answers it: with ranks joined it must fail, not run
                req.sent = False
            if req.slot >= 0:
                bits_mark_ready(bits, req.slot)
            elif not req.sent:
                misses = True
            if req.meta.collective != C_JOIN and req.submitted < oldest:
                oldest = req.submitted
        for s in self.invalid_slots:
            bits_mark_stale(bits, W, s)
        self.invalid_slots.clear()
        if self.joined:     # ready for every cached allreduce; anything else must fail at rank 0
            for s in range(self.cache.capacity):
                if not self.cache.names[s].empty() and self.cache.metas[s].collective == C_ALLREDUCE:
                    bits_mark_ready(bits, s)
        stall = stall_due(&self.stall, now, oldest)
        bits_set_flags(bits, W, (0 if misses else FLAG_NO_MISSES) | (0 if stopping else FLAG_NOT_STOPPING) |
                       (0 if stall else FLAG_NO_STALL) | (FLAG_ALL_JOINED if self.joined else 0) |
                       (0 if self.tune.publish else FLAG_NO_TUNE))

    cdef void _cached(self, vector[uint64_t]& bits, int W, bint run, vector[Item]& items) noexcept nogil:
        """Apply the agreed bits: slots some rank found stale are dropped everywhere (their
        requests go to rank 0 again); unless every rank has joined, slots ready everywhere
        become this round's first items, in slot order."""
        cdef int s
        cdef Item item
        for s in range(self.cache.capacity):
            if not bits_valid(bits, W, s) and not self.cache.names[s].empty():
                self._unslot(s)
                cache_evict(&self.cache, s)
        if not run:
            return
        for s in range(self.cache.capacity):
            if bits_ready(bits, s) and not self.cache.names[s].empty():
                it = self.pending.find(self.cache.names[s])
                if it == self.pending.end() and not self.joined:
                    continue
                item.name = self.cache.names[s]
                item.meta = self.cache.metas[s]
                item.req = deref(it).second if it != self.pending.end() else NULL
                item.value = -1
                item.late.clear()
                item.err = 0
                items.push_back(item)
                self.cache.last_used[s] = self.clock

    cdef void _run_ready(self, vector[Item]& items, bint run, double t0,
                         double ready) noexcept nogil:
        """Execute the round's items (unless a fatal stall stops everything) and feed autotune."""
        cdef TEvent cyc
        cdef size_t k
        cdef double nbytes = 0
        for k in range(items.size()):
            items[k].ready = ready
            items[k].fused = 1
        if self.rec.on and self.rec.mark_cycles:
            cyc.kind = K_CYCLE
            cyc.start = t0
            rec_push(&self.rec, cyc)
        if not run:
            return
        self._execute(items)
        if self.tune.on and self.ctx.rank == 0:
            for k in range(items.size()):
                if items[k].meta.collective == C_ALLREDUCE:
                    nbytes += item_count(items[k].meta) * dtype_size(items[k].meta.dtype)
            tune_round(&self.tune, nbytes)

    cdef void _unslot(self, int s) noexcept nogil:
        it = self.pending.find(self.cache.names[s])
        if it != self.pending.end():
            deref(it).second.slot = -1
            deref(it).second.sent = False

    cdef int _slow(self, vector[Item]& items, bint stopping, bint stall) noexcept nogil:
        """Misses to rank 0 and its answers back. Returns 0, 1 (stop after this round's work)
        or 2 (fatal stall: stop now)."""
        cdef string payload, resp
        cdef vector[char] gathered
        cdef vector[Span] spans
        cdef double now = hv_now()
        cdef int err
        self.slow_rounds += 1
        self._submission(payload, stall, now)
        err = transport_gather(self.ctx.comm, self.ctx.rank, self.ctx.size, payload, gathered, spans)
        if not err and self.ctx.rank == 0:
            resp = controller_respond(&self.table, &self.cache, spans, now, self.clock, &self.stall)
            self._tune_tail(resp)
        if not err:
            err = transport_bcast(self.ctx.comm, self.ctx.rank, resp)
        if err:
            self._die_err(b"negotiation failed: ", err)
            return 2
        return self._apply(resp, items, stopping)

    cdef void _submission(self, string& payload, bint stall, double now) noexcept nogil:
        """This rank's message to rank 0: its misses in submission order (rank 0 numbers names by
        first arrival, and that order becomes the execution and cache-slot order on every rank),
        then, when a stall report was asked for, a probe per name it waits on."""
        cdef Request* req
        cdef vector[Request*] misses
        cdef bint stopping
        hv_lock(&self.qmon)
        stopping = self.stop_requested
        hv_unlock(&self.qmon)
        put_submission(payload, stopping, self.joined)
        for kv in self.pending:
            req = kv.second
            if req.slot < 0 and not req.sent:
                misses.push_back(req)
        sort(misses.begin(), misses.end(), _submitted_before)
        for req in misses:
            put_record(payload, REC_SUBMIT, req.name, req.meta, <int64_t>((now - req.submitted) * 1e6))
            req.sent = True
        if not stall:
            return
        for kv in self.pending:
            req = kv.second
            if req.meta.collective != C_JOIN:
                put_record(payload, REC_PROBE, req.name, req.meta, <int64_t>((now - req.submitted) * 1e6))

    cdef void _tune_tail(self, string& resp) noexcept nogil:
        """Rank 0: the autotune setting to publish with this response, if any."""
        cdef Tune t
        t.publish = self.tune.publish
        if t.publish:
            t.threshold = <int64_t>self.tune.thresholds[self.tune.trial]
            t.cycle_ns = <int64_t>(self.tune.cycles[self.tune.trial] * 1e9)
            self.tune.publish = False
        put_tune(resp, t)

    cdef int _apply(self, string& resp, vector[Item]& items, bint stopping) noexcept nogil:
        """Every rank: act on rank 0's response (same return codes as _slow)."""
        cdef Reader rd
        cdef Head h
        cdef Answer a
        cdef Tune tune
        cdef int64_t i
        cdef Request* req
        reader_init(&rd, resp.data(), resp.size())
        get_head(&rd, &h)
        self.njoined = <int>h.joined_after
        for i in range(h.count):
            get_answer(&rd, &a)
            self._take(a, items)
        get_tune(&rd, &tune)
        if tune.publish:
            self._tune_apply(tune.threshold, tune.cycle_ns)
        # requests whose slot was just handed to another name go back to rank 0
        for kv in self.pending:
            req = kv.second
            if req.slot >= 0 and self.cache.names[req.slot] != req.name:
                req.slot = -1
                req.sent = False
        if h.fatal:
            self.dead_reason = h.fatal_msg
            return 2
        if stopping:
            self.dead_reason = string(b"hvlite was shut down (shutdown() on rank ")
            for i in range(<int64_t>h.stopping.size()):
                if i:
                    self.dead_reason.append(b", ")
                self.dead_reason.append(int_to_str(h.stopping[i]))
            self.dead_reason.append(b") before this collective completed")
            return 1
        return 0

    cdef void _take(self, Answer& a, vector[Item]& items) noexcept nogil:
        """One answer: store its cache slot, fail the request on a mismatch, else queue it."""
        cdef Item item
        it = self.pending.find(a.name)
        item.req = deref(it).second if it != self.pending.end() else NULL
        if a.slot >= 0 and self.ctx.rank != 0:
            cache_put(&self.cache, <int>a.slot, a.name, a.meta)
        if a.status != RESP_OK:
            if item.req != NULL:
                self._complete(item.req, ST_ERROR, E_MISMATCH, a.message, 0)
            return
        if a.meta.collective == C_JOIN:
            self.joined = False
        item.name.swap(a.name)
        item.meta = a.meta
        item.value = a.value
        item.late.swap(a.late)
        item.err = 0
        items.push_back(item)

    cdef void _execute(self, vector[Item]& items) noexcept nogil:
        cdef Item* it
        cdef Request* req
        cdef size_t es, k
        cdef int err, c
        self._doing_items(items, C_ALLREDUCE)
        # Average divides by the set's size: a joined rank counts, contributing zeros (Horovod's rule)
        run_allreduces(&self.ctx, &self.fusion, items, self.ctx.size)
        for k in range(items.size()):
            it = &items[k]
            req = it.req
            err = it.err
            c = it.meta.collective
            if c != C_ALLREDUCE:
                it.start = it.packed = hv_now()
            es = dtype_size(it.meta.dtype) if 0 <= it.meta.dtype < 12 else 1
            if c != C_ALLREDUCE:
                self.doing = self._label(it.meta.collective, it.name)
                err = run_item(self.ctx.comm, it)
            if c != C_ALLREDUCE:
                it.ran = it.unpacked = hv_now()
            if req == NULL or err == HV_ERR_LOST:
                continue        # a lost peer: the round ends in _die_err, failing it with the rest
            if self.rec.on:
                self._record(it, req, item_count(req.meta) * es)
            if err:
                self._complete(req, ST_ERROR, E_MPI, string(b"MPI call failed: "), err)
            else:
                self._complete(req, ST_DONE, E_NONE, string(), 0)

    cdef void _record(self, Item* it, Request* req, size_t nbytes) noexcept nogil:
        cdef TEvent e
        e.name = it.name
        e.kind = it.meta.collective
        e.submitted = req.submitted
        e.ready = it.ready
        e.start = it.start
        e.packed = it.packed
        e.ran = it.ran
        e.unpacked = it.unpacked
        e.done = hv_now()
        e.nbytes = <int64_t>nbytes
        e.dtype = req.meta.dtype
        e.fused = it.fused
        e.algorithm = req.algorithm_used
        e.late = it.late
        rec_push(&self.rec, e)

    cdef void _complete(self, Request* req, int status, int kind, string msg, int code) noexcept nogil:
        cdef string name = req.name
        cdef bint orphan
        cdef char buf[512]
        cdef int blen = 0
        if kind == E_MPI and code != 0:
            blen = error_text(code, buf, 511)
            msg.append(buf, blen)
            req.error_code = code
        hv_lock(&self.qmon)
        self.inflight.erase(name)
        hv_unlock(&self.qmon)
        self.pending.erase(name)
        hv_lock(&self.dmon)
        req.error_kind = kind
        req.error = msg
        hv_store(&req.status, status)
        orphan = req.orphan
        hv_notify_all(&self.dmon)
        hv_unlock(&self.dmon)
        if orphan:
            free(req.result)
            del req

    cdef string _label(self, int collective, const string& name) noexcept nogil:
        cdef string s = string(code_name(HV_COLLECTIVE_NAMES, C_COUNT, collective, b"collective"))
        s.append(b" '")
        s.append(name)
        s.append(b"'")
        return s

    cdef void _doing_round(self) noexcept nogil:
        """The round's description for a lost-rank message: the names this rank waits on."""
        cdef int shown = 0
        self.doing = string(b"a negotiation round")
        for kv in self.pending:
            if shown == 3:
                self.doing.append(b", ...")
                break
            self.doing.append(b" (waiting on " if shown == 0 else b", ")
            self.doing.append(self._label(kv.second.meta.collective, kv.first))
            shown += 1
        if shown:
            self.doing.append(b")")

    cdef void _doing_items(self, vector[Item]& items, int collective) noexcept nogil:
        cdef int k = 0
        cdef size_t i
        for i in range(items.size()):
            if items[i].meta.collective == collective:
                if k == 0:
                    self.doing = self._label(collective, items[i].name)
                k += 1
        if k > 1:
            self.doing.append(b" (fused with ")
            self.doing.append(int_to_str(k - 1))
            self.doing.append(b" more)")

    cdef void _die_err(self, const char* what, int code) noexcept nogil:
        """Stop for good after a failed MPI call; a lost peer is named with what was in flight."""
        cdef string why
        cdef int peer = self.watch.lost
        if code != HV_ERR_LOST or peer < 0:
            self._die(E_MPI, what, code)
            return
        why = string(b"rank ")
        why.append(int_to_str(self.granks[peer] if peer < <int>self.granks.size() else peer))
        why.append(b" is lost: it has not answered for ")
        why.append(int_to_str(<int64_t>(self.watch.lost_silence + 0.5)))
        why.append(b" s (HVLITE_LOST_RANK_SECONDS) while this rank waited in ")
        why.append(self.doing)
        why.append(b"; it was killed, stopped or exited without shutdown(), and MPI cannot go on "
                   b"without it")
        self._die(E_LOST, why.c_str(), 0)

    cdef void _die(self, int kind, const char* why, int code) noexcept nogil:
        """Stop for good: every pending and queued request fails with the reason."""
        cdef string reason = string(why)
        cdef char buf[512]
        cdef int blen = 0
        cdef vector[Request*] rest
        if code:
            blen = error_text(code, buf, 511)
            reason.append(buf, blen)
        hv_lock(&self.qmon)
        self.dead = True
        self.dead_kind = kind
        self.dead_reason = reason
        rest.swap(self.queue)
        hv_unlock(&self.qmon)
        for req in rest:
            self.pending[req.name] = req
        while not self.pending.empty():
            self._complete(deref(self.pending.begin()).second, ST_ERROR, kind, reason, 0)
