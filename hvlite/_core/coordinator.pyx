"""The coordinator: negotiates, fuses and runs every collective of a process set, never holding
the GIL. Rounds run on a background thread, or on the thread of a synchronous caller, which runs
them itself until its own request completes; a round lock makes one of them the only one running
rounds at a time, so every rank still runs one sequence of rounds. A round drains the queue,
agrees on what is ready everywhere (negotiation/), runs it (execute/) and completes handles:
docs/architecture.md walks one all-reduce through it. An idle coordinator sleeps until work is
submitted, waking every few ms up to 50 ms to answer liveness pings (liveness.pyx); every wait
inside a round polls the watch, so a peer that stops answering is named in a LostRankError."""
# distutils: language = c++
from cython.operator cimport dereference as deref
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy
from libc.stdio cimport fprintf, stderr
from libc.stdint cimport int64_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
cimport numpy as cnp

cdef extern from *:
    """
    #include <string>
    #include <unordered_set>
    /* The names in flight on this rank: an async call's name goes in and, in its express round,
       out again at once; the node that held it is kept for the next name (no allocation a call). */
    struct hv_names {
        std::unordered_set<std::string> set;
    #if __cplusplus >= 201703L
        std::unordered_set<std::string>::node_type spare;
        void insert(const std::string& n) {
            if (spare.empty()) { set.insert(n); return; }
            spare.value() = n;
            auto r = set.insert(std::move(spare));
            if (!r.inserted) spare = std::move(r.node);
        }
        void erase(const std::string& n) {
            auto it = set.find(n);
            if (it == set.end()) return;
            auto node = set.extract(it);
            if (spare.empty()) spare = std::move(node);
        }
    #else
        void insert(const std::string& n) { set.insert(n); }
        void erase(const std::string& n) { set.erase(n); }
    #endif
        size_t count(const std::string& n) const { return set.count(n); }
    };
    """
    cppclass hv_names:
        void insert(const string&) nogil
        void erase(const string&) nogil
        size_t count(const string&) nogil
from mpi4py.libmpi cimport *
from hvlite._core.request cimport *
from hvlite._core.codes cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.execute.context cimport Context
from hvlite._core.execute.dispatch cimport (context_init, context_free, calibration_table,
                                           auto_choice, read_way, read_way_done, read_way_slots,
                                           carry_timed)
from hvlite._core.tuning.calibrate cimport Calibration
from hvlite._core.negotiation.cache cimport *
from hvlite._core.negotiation.wire cimport *
from hvlite._core.negotiation.table cimport Table
from hvlite._core.negotiation.controller cimport table_init, controller_respond
from hvlite._core.negotiation.stall cimport Stall, stall_init, stall_due
from hvlite._core.negotiation.exchange cimport exchange_gather, exchange_bcast, submission_message
from hvlite._core.negotiation.rides cimport Rides, rides_init, rides_layout, rides_board, rides_agree, rides_landed
from hvlite._core.shm.segment cimport (shm_and_words, shm_beats, shm_sleepers, shm_preload_room,
                                       shm_preload, shm_arm_preload, shm_disarm)
from hvlite._core.shm.copy cimport (SHM_COPY_MAX, direct_whole, direct_parts, shm_allgather_carry,
                                    shm_alltoall_carry)
from hvlite._core.shm.reducescatter cimport shm_reducescatter_carry
from hvlite._core.kernels.reduce cimport finish_op, kernel_op
from hvlite._core.failure import shown as _shown
from hvlite._core.failure cimport out_of_memory, peer_failed, peer_lost, doing, shut_down, malformed_response
from hvlite._core.execute.fusion cimport FusionBuffer, fusion_free, run_allreduces
from hvlite._core.execute.mpi_collectives cimport *
from hvlite._core.trace cimport Recorder, TEvent, rec_init, rec_push, rec_item, make_writer, K_CYCLE
from hvlite._core.tuning.autotune cimport Tuner, tune_init, tune_grid, tune_round, tune_window_reset
from hvlite._core.pending cimport Pending, make_pending, Ledger, make_ledger, Rounds
from hvlite._core.submission cimport Submission, new_request, fill_request
from hvlite._core.codes cimport error_text
cimport mpi4py.MPI as MPI
from hvlite._core.liveness cimport (Watch, watch_init, watch_free, watch_bind, watch_current,
                                    watch_poll, watch_ping_all, watch_quiesce, watch_share_beats,
                                    watch_fail_all, watch_peer_failed)

cnp.import_array()

cdef extern from "<sched.h>" nogil:
    struct sched_param:
        int sched_priority
    int sched_setscheduler(int pid, int policy, const sched_param* param)
    int SCHED_BATCH

cdef double WAIT_SLICE = 0.1    # seconds a waiting thread runs rounds between looks at signals
cdef double GRACE = 1e-4        # seconds an idle coordinator leaves fresh work to a waiting caller
cdef double _race_pause = 0     # tests: seconds submit() sleeps between its two looks at a name
cdef double _carry_pause = 0    # tests: seconds added to a timed all-reduce's copy beside the vote
cdef double CONFLICT_SECONDS = 0.25     # rank 0 waits this long on a name other ranks may have
                                        # hit a variant of before it drops its variants


def _widen_submit_race(double seconds):
    """Tests only: make submit() sleep between finding a name in flight and looking for its
    request, the window in which that request may complete (it must then go ahead, not fail)."""
    global _race_pause
    _race_pause = seconds


def _slow_carry(double seconds):
    """Tests only: an all-reduce's copy that rides with the vote, where a calibration may time
    the call, takes `seconds` longer (asleep), as a slow copy would."""
    global _carry_pause
    _carry_pause = seconds


def _conflict_after(double seconds):
    """Tests only: how long a request waits on a cached slot, and rank 0 on a name pending in
    full beside cached variants, before they go to rank 0 (default 0.25 s): a test that counts
    trips to rank 0 makes it long, so a rank slowed by the machine cannot add trips."""
    global CONFLICT_SECONDS
    CONFLICT_SECONDS = seconds


cdef class Coordinator(Rounds):
    cdef Context ctx
    cdef hv_monitor qmon          # queue, in-flight names, stop flag, death, the flags below
    cdef hv_monitor dmon          # completions
    cdef hv_monitor rmon          # the round lock: its holder runs rounds and owns the state below
    cdef vector[Request*] queue
    cdef hv_names inflight
    cdef bint stop_requested
    cdef readonly bint dead
    cdef string dead_reason
    cdef int dead_kind
    cdef bint busy                # requests wait in rounds: the thread keeps running them
    cdef bint kick                # a peer waits in a round this rank has not joined
    cdef bint finished            # the last round has run: the thread exits
    cdef bint graced              # the thread waits out GRACE: a submit's wake-up would not end it
    cdef string failure           # why this rank failed alone in a round (watch_fail_all told)
    # times the round lock was let go (atomic), and threads waiting for their turn at it (atomic,
    # changed under dmon): a release that finds none waiting takes no lock
    cdef int turns
    cdef int turn_waiters
    # round state (the holder of rmon: the coordinator thread, or a synchronous caller)
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
    cdef readonly int64_t ridden      # all-reduces done inside the agreement (negotiation/agree.pyx)
    cdef readonly double negotiate_seconds
    cdef readonly double own_seconds      # negotiation minus time spent inside MPI
    cdef Recorder rec
    cdef Tuner tune
    cdef Watch watch
    cdef bint stopped_together    # the last round stopped every rank (stop or fatal stall)
    cdef vector[int] granks       # the set's global ranks, for messages
    # small all-reduces ride in the round's agreement message (negotiation/agree.pyx): [bits | region]
    cdef Rides ride                 # the message, its region's layout (negotiation/rides.pyx)
    cdef bint node_agree            # agree through the node's shared segment (one node, nothing rides)
    cdef bint node_copies           # broadcast and allgather through it (one node, the set's order)
    cdef vector[Item]* doing_items  # what the round waits on now, for a lost-rank message:
    cdef int doing_at               # -1 negotiation, -2 the all-reduces, k items[k]
    cdef Ledger ledger              # every Pending whose request may still be in flight
    cdef Pending spare              # run_now's, made ahead (its req NULL until given out)
    cdef vector[Request*] used      # completed requests let go by their Pendings, for post() (GIL)
    cdef Request* spare_req         # run_now's request, filled again by the next call once it
                                    # completed in its own round (NULL: given to a Pending)
    cdef Request* now_req           # run_now's request for the round it runs (rmon held)
    cdef int now_slot               # and its cache slot when it takes the express round, else -1
    # the express round (run_now's cache hit with nothing else under way): its request, in no
    # table (NULL when none), its name for submit's in-flight check (qmon), and the round's
    # bits and item, kept from call to call so that the round allocates nothing
    cdef Request* xreq
    cdef const string* xname
    cdef vector[uint64_t] xbits
    cdef vector[Item] xitems
    cdef readonly int64_t express_rounds
    cdef int64_t idle_turns           # the thread took the round lock and found nothing to run

    def __cinit__(self):
        hv_monitor_init(&self.qmon)
        hv_monitor_init(&self.dmon)
        hv_monitor_init(&self.rmon)
        self.doing_items = NULL
        self.doing_at = -1
        self.now_req = NULL
        self.now_slot = -1
        self.spare_req = NULL
        self.xreq = NULL
        self.xname = NULL
        self.xitems.resize(1)
        self.ctx.scratch.buf = NULL
        self.fusion.buf = NULL
        self.fusion.cap = 0
        rec_init(&self.rec)
        tune_init(&self.tune)
        watch_init(&self.watch, MPI_COMM_NULL, 0, 0)

    def __init__(self, comm, local, cross, bint uniform, int nodes, size_t segment_bytes,
                 dict cost_model, double cycle_time, size_t fusion_threshold, int cache_capacity,
                 double stall_check, double stall_shutdown, size_t fusion_tensor_limit,
                 tuple options=(False, 0, 0, False, 0), control=None, ranks=None,
                 double lost_after=5.0, double ping_after=0.25, size_t ride_bytes=0):
        """`control`: a communicator of the set for liveness pings only (None: no watch, a
        missing rank is waited for without limit); `ranks`: the set's global ranks;
        `ride_bytes`: room for small all-reduces in the agreement message (the same on every
        rank)."""
        context_init(&self.ctx, comm, local, cross, uniform, nodes, segment_bytes, cost_model, options)
        cdef size_t stride = 0
        cdef char* beats
        if control is not None:
            watch_init(&self.watch, (<MPI.Comm>control).ob_mpi, ping_after, lost_after)
            beats = shm_beats(&self.ctx.shm, &stride)
            if beats != NULL:       # the same on every rank of the node (agreed when mapped)
                slots = [-1] * self.ctx.size
                for i, r in enumerate(local.allgather(self.ctx.rank)):
                    slots[r] = i
                watch_share_beats(&self.watch, beats, stride, slots)
        self.watch.naps = nodes > 1     # data waits cross a network (liveness.pxd)
        for r in (ranks if ranks is not None else range(self.ctx.size)):
            self.granks.push_back(int(r))
        self.fusion.threshold = fusion_threshold
        self.fusion.tensor_limit = fusion_tensor_limit
        cache_init(&self.cache, cache_capacity)
        rides_init(&self.ride, 2 * ((cache_capacity + 63) // 64) + 1, cache_capacity, ride_bytes)
        # the same on every rank: one node, a segment agreed at init, no region
        one_node = (self.ctx.size > 1 and self.ctx.nodes == 1 and self.ctx.shm_ok
                    and self.ctx.shm.base != NULL and self.ctx.shm.L == self.ctx.size)
        self.node_agree = one_node and ride_bytes == 0 and 8 * (<size_t>self.ride.nwords + 1) <= self.ctx.shm.seg
        # the segment's slots in the set's rank order, on every rank
        from mpi4py.MPI import MIN
        self.node_copies = comm.allreduce(
            1 if one_node and self.ctx.shm.me == self.ctx.rank else 0, op=MIN) == 1
        table_init(&self.table, self.ctx.size)
        self.cycle_time = cycle_time
        stall_init(&self.stall, stall_check, stall_shutdown, hv_now())
        self.ledger = make_ledger(&self.dmon)

    def __dealloc__(self):
        del self.spare_req
        for req in self.used:
            del req
        watch_free(&self.watch)
        context_free(&self.ctx)
        fusion_free(&self.fusion)
        hv_monitor_destroy(&self.qmon)
        hv_monitor_destroy(&self.dmon)
        hv_monitor_destroy(&self.rmon)

    # ---- user-thread side -------------------------------------------------------------------

    def submit(self, name, Submission s, cnp.ndarray inp, cnp.ndarray out):
        """Queue one collective (`s`: which and how, submission.pyx; `inp`/`out`: its buffers,
        None for none; out None: the coordinator allocates the result); returns a Pending, or
        (kind, message) for a stopped coordinator or a name in flight. A name still in flight
        here, its handle held or dropped, is refused at once (Horovod's rule): the earlier
        request may need a peer that waits for this rank (in a barrier, say). An automatic name
        (`s.reused`, round again after AUTO_NAMES calls) is waited for instead: every rank
        submits unnamed calls in one order, so each peer submitted the earlier one before
        anything it may wait in now. So is this rank's own poisoned request (a call that failed
        here, retried under its name). `s.inline`: the caller waits for it now, so its own thread
        runs the rounds (no hand-off to the coordinator thread and back)."""
        cdef string cname = name.encode()
        cdef bint inline = s.inline
        cdef Request* req
        cdef int problem = 0
        cdef Pending p
        for attempt in range(3):
            hv_lock(&self.qmon)
            problem = 1 if self.dead else (2 if self._in_flight(cname) else 0)
            hv_unlock(&self.qmon)
            if problem != 2 or attempt == 2:
                break
            if _race_pause > 0:
                with nogil:
                    hv_sleep(_race_pause)
            p = self.ledger.dropped(cname, True)
            # a poisoned request (this rank's failed call) is waited for too: it completes, with
            # its error on every rank, once the peers' calls of the name meet it, and a retry
            # under the same name refused here would leave them waiting in theirs
            if not s.reused and (p is None or p.req.meta.error.empty()):
                p = None        # not held from here: the refusal's message tells dropped from held
                break
            if p is not None:
                p.wait()
            # else it completed between the check and the search: ask again
        if problem == 0:
            req = new_request(s, cname, inp, out)
            # held from before the coordinator can see it: a request it completes at once is
            # still let go of by the next sweep
            p = make_pending(req, &self.dmon, self, (inp, out))
            self.ledger.track(p)
            problem = self._enqueue(req, inline)   # another thread may have taken the name
            if problem:
                self.ledger.live.discard(p)
                p.req = NULL            # never queued: freed here, not by the Pending
                p = None
                del req
        if problem == 1:
            return (self.dead_kind, self.dead_reason.decode("utf-8", "replace"))
        if problem == 2:
            held = "dropped before it was synchronized" if self.ledger.dropped(cname, False) is not None \
                else "not yet synchronized"
            return (E_DUPLICATE, f"a collective named {_shown(name)} is already in flight on this "
                                 f"rank (its handle {held}); a name may be in flight once: "
                                 "synchronize the earlier request before submitting the name "
                                 "again, or use another name")
        if inline:      # a first turn here; Pending.wait goes on, checking for signals
            with nogil:
                self._drive(req, req.submitted + WAIT_SLICE)
            if hv_load(&req.status) != ST_PENDING:
                p.waited()
            else:
                self.ledger.sweep()
        return p

    cdef object post(self, str name, Submission s, cnp.ndarray inp, cnp.ndarray out):
        """The lean face's asynchronous submit: submit()'s common case (a running coordinator,
        the name not in flight) as one C call under one lock; anything else (a refusal, a name
        to wait for) goes through submit() itself."""
        cdef Py_ssize_t n
        cdef const char* utf8 = PyUnicode_AsUTF8AndSize(name, &n)
        cdef Request* req
        cdef Pending p
        cdef bint ok
        if self.used.empty():
            req = new Request()
        else:       # one a Pending let go of: its strings and vectors keep their room
            req = self.used.back()
            self.used.pop_back()
        try:
            fill_request(req, s, utf8, n, inp, out, True)
        except BaseException:
            self.recycle(req)
            raise
        p = make_pending(req, &self.dmon, self, inp if out is inp else (inp, out))
        self.ledger.track(p)        # held before the coordinator can see it (submit's rule)
        if self._enqueue(req, False) == 0:
            return p
        self.ledger.live.discard(p)
        p.req = NULL
        self.recycle(req)
        return self.submit(name, s, inp, out)

    cdef int _enqueue(self, Request* req, bint inline) noexcept:
        """Queue `req` under the queue's lock: 0, or 1 for a dead coordinator, 2 for its name
        in flight here (nothing queued)."""
        cdef int problem = 0
        hv_lock(&self.qmon)
        if self.dead:
            problem = 1
        elif self._in_flight(req.name):
            problem = 2
        else:
            self.inflight.insert(req.name)
            self.queue.push_back(req)
            # no wake-up for a thread waiting out its grace (it would only wait again): an
            # async call then synchronize paid a futex wake and a context switch a call
            if not inline and not self.graced:
                hv_notify_all(&self.qmon)
        hv_unlock(&self.qmon)
        return problem

    def run_now(self, name, Submission s, cnp.ndarray inp, cnp.ndarray out):
        """A synchronous call (the lean face's: `name` a str) run on this thread now when
        nothing else is under way: its request goes straight into a round
        that this thread runs, with no queue, no hand-off and no Pending unless it is still in
        flight after that round. Returns None once it completed without error, (kind, message,
        code) when it failed or was refused, or a Pending the caller waits on as for submit()
        (its first round did not complete it: a peer not there yet, a cache miss; or, completed,
        it holds a result the coordinator allocated: an allgather's rows unlike `out`). Anything
        else under way (queued work, another thread's round, a name in flight) goes through
        submit(). A cache hit takes the express round (_express): no table holds its request,
        and the request is filled again by the next call, so a steady loop allocates nothing."""
        cdef Py_ssize_t n
        cdef const char* utf8 = PyUnicode_AsUTF8AndSize(name, &n)     # a str: the lean face's
        cdef Request* req = self.spare_req
        # The spare is this call's until it is put back (another thread's call, made while this
        # one runs its round without the GIL, makes its own).
        cdef Pending p = self.spare
        cdef int took, status
        self.spare_req = NULL
        if req == NULL:
            req = new Request()
        try:
            fill_request(req, s, utf8, n, inp, out, False)    # stamped by _take_now
        except BaseException:
            del req
            raise
        self.spare = None
        keep = inp if out is inp else (inp, out)     # made before too: in place, no new object
        if p is None:       # made before the round: nothing can fail once the request is in
            # (no owner until given out: a spare pointing back here would be a reference cycle,
            # keeping the coordinator and its segment alive after shutdown until a collection)
            p = make_pending(NULL, &self.dmon, None, None)
        with nogil:
            took = self._take_now(req)
        if took == 0:
            self.spare = p
            self._spare(req)
            return self.submit(name, s, inp, out)
        if self.ledger.live:        # dropped handles completed meanwhile are let go, as submit does
            self.ledger.sweep()
        if took == 1:
            # In flight when the round lock was let go: held from here as submit's are. Another
            # thread may complete it meanwhile (or has): the ledger learns of that under the
            # completion monitor (track_late), and the Pending frees it under that monitor too.
            p.req, p.owner, p.keep = req, self, keep
            self.ledger.track_late(p)
            return p
        # completed in this thread's own round: nobody else touches it
        status = hv_load(&req.status)
        if status == ST_DONE and req.result != NULL:
            # a result the coordinator allocated (rows unlike the output's): the caller takes
            # it from a Pending, as from submit's
            p.req, p.owner, p.keep = req, self, keep
            return p
        self.spare = p
        try:
            if status == ST_DONE:
                return None
            return (req.error_kind, req.error.decode("utf-8", "replace"), req.error_code)
        finally:
            free(req.result)
            req.result = NULL
            self._spare(req)

    cdef void recycle(self, Request* req) noexcept:
        """(GIL) A completed request its Pending let go of: kept for post() (a few), else freed."""
        if self.used.size() < 64:
            self.used.push_back(req)
        else:
            del req

    cdef void _spare(self, Request* req):
        """Keep a request no one holds for the next run_now (one kept; any other is freed)."""
        if self.spare_req == NULL:
            self.spare_req = req
        else:
            del req

    cdef bint _in_flight(self, const string& name) noexcept nogil:
        """(qmon held) Whether a request of this name is in flight here."""
        return self.inflight.count(name) != 0 or (self.xname != NULL and deref(self.xname) == name)

    cdef int _take_now(self, Request* req) noexcept nogil:
        """run_now's round: 0 when something else is under way (nothing done); else, once one
        round has run with `req`, 2 when that round completed it (or failed it), 1 when it was
        still in flight as the round lock was let go (another thread may complete it since).
        A cache hit while nothing else is pending here takes the express round (_express)."""
        cdef Watch* saved
        cdef bint ok, last, kick, left, done
        cdef int slot = -1
        if not hv_trylock(&self.rmon):
            return 0
        slot = self._express_slot(req)
        hv_lock(&self.qmon)
        ok = not (self.dead or self.stop_requested or self.finished or self.busy or self.kick
                  or not self.queue.empty() or self._in_flight(req.name))
        if ok:
            if slot >= 0:
                self.xname = &req.name
            else:
                self.inflight.insert(req.name)
        hv_unlock(&self.qmon)
        if not ok:
            self._release_round()
            return 0
        if slot < 0:
            req.submitted = hv_now()        # the express round stamps it only if it waits
        saved = watch_current()
        watch_bind(&self.watch)
        self.now_req = req
        self.now_slot = slot
        last = self._step() != 0
        kick = self.watch.ctl != MPI_COMM_NULL and self.watch.wanted > self.watch.clock
        watch_bind(saved)
        done = hv_load(&req.status) != ST_PENDING      # read while only this thread runs rounds
        left = not self.pending.empty()
        if self.xname != NULL or (not last and (kick or left)):
            hv_lock(&self.qmon)     # what is left is the coordinator thread's
            self.xname = NULL       # before the round lock goes: the name is no longer in flight
            if not last and (kick or left):
                self.kick = self.kick or kick
                hv_notify_all(&self.qmon)
            hv_unlock(&self.qmon)
        self._release_round()
        return 2 if done else 1

    cdef int _express_slot(self, Request* req) noexcept nogil:
        """(rmon held) req's cache slot when it may take the express round (a hit while nothing
        else is pending here, no join, no timeline), else < 0."""
        if (self.pending.empty() and self.invalid_slots.empty() and not self.joined
                and self.njoined == 0 and not self.rec.on
                and (self.ctx.rank != 0 or self.table.entries.empty())
                and cacheable(req.meta.collective)):
            return cache_lookup(&self.cache, req.name, req.meta)    # STALE (< 0): the round's
        return -1

    cdef int _express_queued(self, Request* req) noexcept nogil:
        """(rmon held) _drive's one look under the queue's lock: -1 when a stop is under way (the
        round is left to the coordinator thread), 1 when `req`, submitted and now waited for, is
        the queue's only request and takes the express round, as a synchronous call's would
        (async then synchronize: no table holds it), else 0 (a general round). Its name stays
        in flight (xname) until the round lets go."""
        cdef int slot = self._express_slot(req)
        cdef int r = 0
        hv_lock(&self.qmon)
        if self.stop_requested or self.finished:
            r = -1
        elif slot >= 0 and not (self.dead or self.busy or self.kick or self.queue.size() != 1
                                or self.queue[0] != req):
            self.queue.clear()
            self.inflight.erase(req.name)
            self.xname = &req.name
            r = 1
        hv_unlock(&self.qmon)
        if r == 1:
            self.now_req = req
            self.now_slot = slot
        return r

    def sweep(self):
        self.ledger.sweep()

    def in_flight(self):
        """This rank's requests not yet completed (handles dropped or not), oldest first."""
        return self.ledger.in_flight()

    def held(self):
        """How many requests the runtime still holds (tests: dropped work is let go)."""
        return len(self.ledger)

    def wait_all(self):
        """Wait for every request this rank submitted (join, removing a set)."""
        for q in self.ledger.in_flight():
            q.wait()

    def release_all(self):
        """After the thread has stopped (every request completed): let go of them all."""
        self.ledger.release_all()

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

    cdef void drive_until(self, Request* req, double until) noexcept nogil:
        """Pending.wait: run rounds on the waiting thread until req completes or the clock
        reaches `until` (then the caller checks for signals and comes back)."""
        self._drive(req, until)

    cdef int sweep_done(self) except -1:
        return self.ledger.sweep()

    cdef int let_go(self, Pending p) except -1:
        p.req.held = NULL
        self.ledger.live.discard(p)
        return 0

    def outputs_shared(self):
        """Whether this set's peers map this process's output arena (_core/shm/arena.pyx), so its
        out-of-place results should come from there."""
        return self.ctx.outs != NULL

    def cost_model(self):
        """The model this set's auto falls back on (its shm barrier measured by this set)."""
        return self.ctx.model

    def calibration(self, out_of_place=False):
        """What auto measured on this set, per size class (dispatch.calibration_table), for
        calls in place or (out_of_place) not; read between rounds."""
        return self._measured(0, out_of_place)

    def shm_ways(self, fused=False, out_of_place=False):
        """Which way the shared segment took per size class where it measured both (through its
        slots or straight from the peers' buffers), for single buffers in place, single buffers
        out of place, or (fused) batches of several tensors; the same table as calibration().
        Read between rounds."""
        if out_of_place and not fused:
            return self._measured(3, True)
        return self._measured(1, fused)

    def shm_waits(self):
        """How this rank's waits in the shared segment's barriers went: `slept`, the waits that
        outlasted the spin and the yields and reached the sleep stage; `woken`, the futex waits
        that a wake-up ended (the others timed out to poll the liveness watch, or found the
        word moved already); `woke`, the barriers where this rank, arriving last, found peers
        asleep on it and woke them; `carried`, the copy-ins that rode with the vote; `read_direct`,
        the allgathers and alltoalls that read a peer's own buffer (shm/copy.pyx).
        Read between rounds."""
        cdef long long slept, woken, woke, carried, read_direct
        with nogil:
            hv_lock(&self.rmon)
            slept, woken, woke = self.ctx.shm.slept, self.ctx.shm.woken, self.ctx.shm.woke
            carried, read_direct = self.ctx.shm.carried, self.ctx.shm.read_direct
            self._release_round()
        return {"slept": slept, "woken": woken, "woke": woke, "carried": carried,
                "read_direct": read_direct}

    def _sleepers(self):
        """Tests only: how many of the node's threads are asleep on this rank's barrier epoch now
        (a test holds this rank back until its peers sleep, rather than for a guessed time)."""
        return shm_sleepers(&self.ctx.shm)

    def shm_reads(self, alltoall=False):
        """Whether allgathers (or alltoalls) read their large parts from the senders ("direct")
        or copied them through the slots, per size class where it measured both
        (dispatch.read_way); the same table as calibration(). Read between rounds."""
        return self._measured(2, alltoall)

    cdef dict _measured(self, int which, bint upper):
        """A snapshot of auto's calibration (which 0), the segment's ways' (1; 3: out of place)
        or the allgather and alltoall reads' (2), as a table."""
        cdef Calibration snap
        with nogil:
            hv_lock(&self.rmon)
            snap = (self.ctx.cal if which == 0 else self.ctx.ways if which == 1
                    else self.ctx.reads if which == 2 else self.ctx.ways_apart)
            self._release_round()
        return calibration_table(&snap, upper)

    def _scale_way(self, str way, double factor):
        """Tests only: the segment's timed calls of `way` ("slots" or "direct") record factor x
        their time from now on, as if that way were slower here."""
        from hvlite._core.codes import SHM_WAYS
        cdef int code = SHM_WAYS.code(way)
        with nogil:
            hv_lock(&self.rmon)
            self.ctx.ways.scale, self.ctx.ways.scale_only = factor, code
            self.ctx.ways_apart.scale, self.ctx.ways_apart.scale_only = factor, code
            self._release_round()

    def _scale_read(self, str way, double factor):
        """Tests only: the allgathers' and alltoalls' timed calls of `way` ("slots" or "direct")
        record factor x their time from now on, as if that way were slower here."""
        from hvlite._core.codes import SHM_WAYS
        cdef int code = SHM_WAYS.code(way)
        with nogil:
            hv_lock(&self.rmon)
            self.ctx.reads.scale, self.ctx.reads.scale_only = factor, code
            self._release_round()

    def _scale_trials(self, double factor, str algorithm=None):
        """Tests only: auto's timed calls (its trials, confirming windows and challenges; of
        `algorithm` only, when given) record factor x their time from now on (3: a calibration
        disturbed as a busy machine would, which the job's later calls must catch)."""
        from hvlite._core.codes import ALGORITHMS
        found = -1 if algorithm is None else ALGORITHMS.code(algorithm)
        if found is None:
            raise ValueError(f"_scale_trials: no algorithm {algorithm!r}")
        cdef int code = found
        with nogil:
            hv_lock(&self.rmon)
            self.ctx.cal.scale, self.ctx.cal.scale_only = factor, code
            self._release_round()

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
        tune_grid(&self.tune, &self.qmon, thresholds, cycles_ms, warmup_rounds, window_rounds,
                  window_seconds, log_path if self.ctx.rank == 0 else None)  # rank 0 logs

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
        """{name: [slots]} of the response cache, a slot per variant (read it while no
        collective is in flight)."""
        out = {}
        for s in range(self.cache.capacity):
            if not self.cache.names[s].empty():
                out.setdefault(self.cache.names[s].decode(), []).append(s)
        return out

    def stats(self):
        return {"rounds": self.rounds, "slow_rounds": self.slow_rounds, "ridden": self.ridden,
                "idle_turns": self.idle_turns,
                "negotiate_seconds": self.negotiate_seconds, "own_seconds": self.own_seconds,
                "cached_names": self.cache.slot_of.size(),
                "cached_slots": sum(1 for s in range(self.cache.capacity)
                                    if not self.cache.names[s].empty())}

    def run(self):
        """The thread body: the loop runs without the GIL until the coordinator stops."""
        with nogil:
            self._loop()

    # ---- coordinator thread -----------------------------------------------------------------

    cdef void _loop(self) noexcept nogil:
        cdef double start, remaining, until, grace
        cdef bint go, fresh, idle
        cdef sched_param batch
        batch.sched_priority = 0
        # On one node a submit's wake-up must not preempt the submitting thread (on a busy core
        # that cost two context switches per async call, ~15 us): this thread runs when a core
        # is free or its turn comes, as a batch task (pid 0: this thread; no privilege needed).
        # Across nodes it keeps the normal policy: there it drives transfers of milliseconds
        # that the links wait on, and a batch task woken from a data wait's nap waited for the
        # compute threads' turn to end (a small all-reduce across 2 emulated hosts took 7 ms in
        # a ResNet-18 step; with fp16 the step ran 5-10% faster without it, benchmarks.md).
        if self.ctx.nodes == 1:
            sched_setscheduler(0, SCHED_BATCH, &batch)
        watch_bind(&self.watch)
        while True:
            hv_lock(&self.qmon)
            self._idle()
            go = not self.finished
            fresh = go and not (self.busy or self.kick or self.stop_requested)
            self.kick = False
            if fresh and self.cycle_time > 0:
                # Work submitted to an idle coordinator: a moment (more submits do not end it)
                # for the submitting thread to wait on it and run the round itself, with no
                # wake-up here and hand-back there (an async 4 KiB call, then synchronize).
                grace = GRACE if GRACE < self.cycle_time else self.cycle_time
                until = hv_now() + grace
                self.graced = True
                while not (self.stop_requested or self.finished):
                    remaining = until - hv_now()
                    if remaining <= 0:
                        # each request has its grace from its own submit: one queued since
                        # the wake-up is likely the submit of a caller about to wait on it
                        # (a loop of async calls then synchronize), whose round taken here
                        # left the caller asleep on the round lock
                        if self.queue.empty() or self.queue[0].submitted + grace <= hv_now():
                            break
                        until = self.queue[0].submitted + grace
                        continue
                    hv_wait(&self.qmon, remaining)
                self.graced = False
                # the callers ran it all: no look under the round lock (a caller that found it
                # held slept until it was let go)
                idle = (self.queue.empty() and not (self.busy or self.kick
                                                    or self.stop_requested or self.finished))
            else:
                idle = False
            hv_unlock(&self.qmon)
            if not go:
                return
            if idle:
                continue
            hv_lock(&self.rmon)
            start = hv_now()
            if self._wanted():      # asked again under the lock: a caller may have run it already
                self._step()
            else:
                self.idle_turns += 1
            self._release_round()
            hv_lock(&self.qmon)
            # between rounds, a pause of the cycle time (ended by a submit) gathers a burst of
            # submissions into fewer rounds (a thread that waits on a handle runs the rounds
            # itself meanwhile: its burst is over)
            if (self.busy and self.cycle_time > 0
                    and not (self.stop_requested or self.finished)):
                remaining = start + self.cycle_time - hv_now()
                if remaining > 0:
                    hv_wait(&self.qmon, remaining)
            hv_unlock(&self.qmon)

    cdef bint _wanted(self) noexcept nogil:
        """(rmon held) Whether a round should run now: work queued or pending, a stop asked
        for, or a peer waiting in a round this rank has not joined."""
        cdef bint w
        hv_lock(&self.qmon)
        w = not self.finished and (not self.queue.empty() or self.stop_requested)
        hv_unlock(&self.qmon)
        return w or not self.pending.empty() or (self.watch.ctl != MPI_COMM_NULL and
                                                 self.watch.wanted > self.watch.clock)

    cdef int _step(self) noexcept nogil:
        """(rmon held) Take the queue and run one round; returns 1 when it was the last. With
        `now_req` set (run_now: the queue was empty, no stop asked for), that request alone."""
        cdef vector[Request*] fresh
        cdef bint stopping = False
        cdef double t0 = -1
        cdef int last
        if self.now_req != NULL and self.now_slot >= 0:
            last = self._express(self.now_req, self.now_slot)
            self.now_req = NULL
            self.now_slot = -1
        else:
            if self.now_req != NULL:
                fresh.push_back(self.now_req)
                t0 = self.now_req.submitted     # stamped just now: the round's start too
                self.now_req = NULL
            else:
                hv_lock(&self.qmon)
                fresh.swap(self.queue)
                stopping = self.stop_requested
                hv_unlock(&self.qmon)
            self._intake(fresh)
            last = self._round(stopping, t0)
        if last:
            if self.stopped_together:
                watch_quiesce(&self.watch)
            hv_lock(&self.qmon)
            self.finished = True
            self.busy = False
            hv_notify_all(&self.qmon)
            hv_unlock(&self.qmon)
            return 1
        if self.busy != (not self.pending.empty()):     # written only here and above (rmon held)
            hv_lock(&self.qmon)
            self.busy = not self.pending.empty()
            hv_unlock(&self.qmon)
        return 0

    cdef void _drive(self, Request* req, double until) noexcept nogil:
        """A thread waiting for `req` runs rounds itself until it completes, one round per
        turn of the round lock: while another thread holds the lock it sleeps on the completion
        monitor instead (woken when a request completes or the lock is let go), so a round
        that completes its request lets it go on at once. The lock is never held across
        rounds: another thread of this rank (a second synchronous call, a chained collective)
        must be able to take its turn, or ranks whose threads wait in different orders would
        each hold the round the others need. A stop is left to the coordinator thread, and so
        is whatever is still pending afterwards. It returns at `until` too (after one turn at
        least), so that the caller can run Python's signal handlers (a wait stays
        interruptible). An async call's express round (_express_queued) takes the queue's lock
        twice in all: once to take the request, once to let its name go and hand what is left
        to the coordinator thread."""
        cdef Watch* saved
        cdef bint kick = False, last = False, told = False, first = True
        cdef int turn, way
        # the first turn without a look at the clock: `until` is a slice away
        while hv_load(&req.status) == ST_PENDING and not last and (first or hv_now() < until):
            first = False
            turn = hv_load_sc(&self.turns)
            if hv_trylock(&self.rmon):
                if hv_load(&req.status) == ST_PENDING:
                    way = self._express_queued(req)
                    if way < 0:
                        self._release_round()
                        break
                    saved = watch_current()
                    watch_bind(&self.watch)
                    last = self._step() != 0
                    kick = self.watch.ctl != MPI_COMM_NULL and self.watch.wanted > self.watch.clock
                    watch_bind(saved)
                    if self.xname != NULL:      # before the round lock goes (_take_now's way)
                        hv_lock(&self.qmon)
                        self.xname = NULL
                        if last or hv_load(&req.status) != ST_PENDING:    # this turn is the last
                            self._hand_over(kick)
                            told = True
                        hv_unlock(&self.qmon)
                self._release_round()
                continue
            # Registered before turns is read again: a release either comes after this and
            # wakes it (it takes dmon, held here until the wait lets go of it), or came before
            # and this read sees its turn (both sides sequentially consistent)
            hv_lock(&self.dmon)
            hv_add(&self.turn_waiters, 1)
            if hv_load(&req.status) == ST_PENDING and hv_load_sc(&self.turns) == turn:
                hv_wait(&self.dmon, 0.05)
            hv_add(&self.turn_waiters, -1)
            hv_unlock(&self.dmon)
        if not told:
            hv_lock(&self.qmon)
            self._hand_over(kick)
            hv_unlock(&self.qmon)

    cdef void _hand_over(self, bint kick) noexcept nogil:
        """(qmon held) A waiting thread's last look: the coordinator thread is woken for what is
        left (a peer's ping, work queued or pending, a stop)."""
        self.kick = self.kick or kick
        if self.kick or self.busy or not self.queue.empty() or self.stop_requested:
            hv_notify_all(&self.qmon)

    cdef void _release_round(self) noexcept nogil:
        """Let go of the round lock, waking threads that wait for their turn at it (_drive);
        with none waiting, no other lock is taken (a synchronous call's round: one turn less).
        Every holder lets go through here, the idle thread's liveness poll and the tables'
        readers too: a caller whose turn came while one of them held the lock would otherwise
        sleep until a completion or its 50 ms wait ran out."""
        hv_unlock(&self.rmon)
        hv_add(&self.turns, 1)
        if hv_load_sc(&self.turn_waiters) > 0:
            hv_lock(&self.dmon)
            hv_notify_all(&self.dmon)
            hv_unlock(&self.dmon)

    cdef void _idle(self) noexcept nogil:
        """(qmon held) Sleep until work is queued or pending, a stop is asked for, or a peer
        pings for a round this rank has not joined; the sleep is woken at once by a submit, and
        otherwise polls the liveness watch at intervals doubling from 1 to 50 ms (unless a
        synchronous caller holds the round lock: it answers pings itself while it waits)."""
        cdef double pause = 1e-3
        cdef bint wanted
        while (self.queue.empty() and not self.busy and not self.kick and not self.stop_requested
               and not self.finished):
            if self.watch.ctl == MPI_COMM_NULL:
                hv_wait(&self.qmon, -1)
                continue
            hv_wait(&self.qmon, pause)
            if not (self.queue.empty() and not self.busy and not self.kick
                    and not self.stop_requested and not self.finished):
                return          # woken for work: no MPI call stands between a submit and its round
            hv_unlock(&self.qmon)
            wanted = False
            if hv_trylock(&self.rmon):
                watch_poll(&self.watch, 0.0)
                wanted = self.watch.wanted > self.watch.clock
                self._release_round()
            hv_lock(&self.qmon)
            if wanted:          # the round the peer waits in is run at once, with no grace
                self.kick = True
                return
            pause = pause * 2 if pause < 25e-3 else 50e-3

    cdef void _intake(self, vector[Request*]& fresh) noexcept nogil:
        cdef int slot
        cdef size_t i
        cdef const vector[int]* variants
        for req in fresh:
            if req.meta.collective == C_JOIN:
                self.joined = True
            slot = cache_lookup(&self.cache, req.name, req.meta)
            if slot == STALE:   # poisoned, or rows unlike rank 0's: everyone drops the name
                variants = cache_variants(&self.cache, req.name)
                if variants != NULL:
                    for i in range(variants.size()):
                        self.invalid_slots.push_back(deref(variants)[i])
                slot = -1
            req.slot = slot if cacheable(req.meta.collective) else -1
            req.sent = False
            self.pending[req.name] = req

    cdef int _round(self, bint stopping, double t0) noexcept nogil:
        """One negotiation round (t0: when it began, < 0 for now); returns 1 when the
        coordinator must stop."""
        cdef vector[Item] items
        cdef int done
        self.doing_items = &items       # a lost-rank message names what the round waits on
        self.doing_at = -1
        done = self._negotiate_and_run(stopping, items, t0 if t0 >= 0 else hv_now())
        self.doing_items = NULL
        return done

    cdef int _negotiate_and_run(self, bint stopping, vector[Item]& items, double t0) noexcept nogil:
        cdef int W = (self.cache.capacity + 63) // 64, err
        cdef vector[uint64_t] bits
        if self.ride.dirty:
            rides_layout(&self.ride, &self.cache)
        self._vote(bits, W, stopping, t0)
        self.own_seconds += hv_now() - t0
        err = self._agree(bits, W, stopping)
        return self._settle(bits, W, items, t0, hv_now(), err)

    cdef int _agree(self, vector[uint64_t]& bits, int W, bint stopping) noexcept nogil:
        """The round's agreement: every rank's bits ANDed (and small all-reduces riding along)."""
        self.watch.negotiating = True
        if stopping or not (bits_flags(bits, W) & FLAG_NO_STALL):
            watch_ping_all(&self.watch)     # everyone into this round now: a stop, a stall report
        if self.node_agree:     # one node, its segment: flags instead of MPI messages
            return shm_and_words(&self.ctx.shm, bits.data(), self.ride.nwords, bits_tag(bits, W))
        return rides_agree(&self.ride, self.ctx.comm, bits.data())

    cdef int _settle(self, vector[uint64_t]& bits, int W, vector[Item]& items, double t0,
                     double t1, int err) noexcept nogil:
        """The round after its agreement (agreed at t1, `err` its failure): drop what some rank
        found stale, run what is ready everywhere, go to rank 0 for the rest."""
        cdef int finish = 0
        cdef double ready
        cdef uint64_t flags
        if err:
            self._die_err(b"negotiation failed: ", err)
            return 1
        self.clock += 1
        self.watch.clock = self.clock
        self.watch.negotiating = False
        self.rounds += 1
        flags = bits_flags(bits, W)
        self._cached(bits, W, not (flags & FLAG_ALL_JOINED), (flags & FLAG_NOT_JOINED) != 0, items)
        ready = hv_now()
        self.own_seconds += ready - t1
        if (flags & SLOW_FLAGS) != SLOW_FLAGS:
            finish = self._slow(items, not (flags & FLAG_NOT_STOPPING), not (flags & FLAG_NO_STALL))
            self.ride.dirty = True        # rank 0 may have given out cache slots
            if self.dead:       # the gather or broadcast failed: everything has failed already
                return 1
            ready = hv_now()
        self.negotiate_seconds += ready - t0
        # after rank 0's gather and broadcast the ranks leave out of step: auto times nothing
        self.ctx.cal.untimed = self.ctx.ways.untimed = (flags & SLOW_FLAGS) != SLOW_FLAGS
        self.ctx.reads.untimed = self.ctx.ways_apart.untimed = self.ctx.cal.untimed
        self._run_ready(items, finish < 2, t0, ready)
        self.ctx.cal.untimed = self.ctx.ways.untimed = self.ctx.reads.untimed = False
        self.ctx.ways_apart.untimed = False
        if self._ran_into_failure():
            return 1
        if finish:
            self.stopped_together = True
            self._die(E_SHUTDOWN if finish == 1 else (E_STALL if finish == 2 else E_FAILED),
                      self.dead_reason.c_str(), 0)
            return 1
        return 0

    cdef int _express(self, Request* req, int slot) noexcept nogil:
        """run_now's round for a cache hit while nothing else is pending here (_take_now looked):
        this rank votes for its one slot and, when the agreement comes back clean (the slot
        ready everywhere, nothing stale, no rank going to rank 0 or joined), runs it with no
        table holding the request, in a round that allocates nothing. Otherwise the request
        joins the tables as _intake would have put it there, and the round goes on as any
        other (_settle). The agreed bits decide what runs, so every rank runs the same
        whichever way it went. Returns 1 when the coordinator must stop."""
        cdef int W = (self.cache.capacity + 63) // 64, err, w, done
        cdef double t0
        cdef uint64_t flags, want = SLOW_FLAGS | FLAG_NOT_JOINED
        cdef bint clean
        cdef size_t carried
        cdef vector[Item] items
        if self.ride.dirty:
            rides_layout(&self.ride, &self.cache)
        req.slot = slot
        req.sent = False
        bits_reset(self.xbits, W)
        bits_mark_ready(self.xbits, slot)
        if self.ride.at[slot] >= 0:
            rides_board(&self.ride, self.ride.at[slot], req.input)
        carried = self._carry(req)
        bits_set_flags(self.xbits, W, FLAG_NO_MISSES | FLAG_NOT_STOPPING | FLAG_NO_STALL |
                       FLAG_NOT_JOINED | (0 if self.tune.publish else FLAG_NO_TUNE) |
                       (FLAG_CARRIED if carried else 0))
        self.xreq = req
        err = self._agree(self.xbits, W, False)
        flags = bits_flags(self.xbits, W)
        clean = err == 0 and (flags & want) == want and bits_ready(self.xbits, slot)
        w = W
        while clean and w < 2 * W:      # no slot found stale anywhere
            clean = self.xbits[w] == ~(<uint64_t>0)
            w += 1
        if not clean:
            self._materialize(req)
            t0 = req.submitted
            self.doing_items = &items
            self.doing_at = -1
            done = self._settle(self.xbits, W, items, t0, t0, err)
            self.doing_items = NULL
            return done
        self.clock += 1
        self.watch.clock = self.clock
        self.watch.negotiating = False
        self.rounds += 1
        self.express_rounds += 1
        self._hit_item(&self.xitems[0], slot, req, self.ride.at[slot])    # keeps its room
        # no clock read: the timeline is off (_take_now) and negotiate_seconds counts the
        # other rounds (two reads were 8% of a barrier on one rank)
        self.doing_items = &self.xitems
        self.doing_at = -1
        if flags & FLAG_CARRIED:    # every rank's part is in its slot: the vote's barrier was the data's
            shm_arm_preload(&self.ctx.shm, self.ride.nwords, carried)
        self._run_ready(self.xitems, True, 0, 0)
        shm_disarm(&self.ctx.shm)   # (unused where the collective went another way: alike everywhere)
        self.doing_items = NULL
        self.xreq = NULL
        if hv_load(&req.status) == ST_PENDING:     # not completed (this rank failed, a peer was
            self._materialize(req)                  # lost): failed below with anything else
        return self._ran_into_failure()

    cdef size_t _carry(self, Request* req) noexcept nogil:
        """On one node, the express round's data ride with its vote where the collective's first
        step would copy them into the node's slots and take a barrier: an all-reduce small enough
        for every rank to reduce every slot, a broadcast's root, an allgather (its count, then
        its rows), a reducescatter or an alltoall whose parts fit one round. This rank's part
        goes into its slot beside the vote now (shm_preload) and the vote says so
        (FLAG_CARRIED); when every rank's does, the collective reads the slots the vote's
        barrier published and takes no barrier of its own: one barrier a call instead of two.
        Returns what the collective looks for (0: nothing rides). Each rank decides for itself;
        where one's differs, the agreed flag is clear and nothing rides anywhere."""
        cdef Meta* m = &req.meta
        cdef size_t nbytes
        cdef int64_t rows = m.shape[0] if m.shape.size() else 1
        cdef vector[int64_t] splits
        cdef double t = 0
        cdef bint timed
        self.ctx.shm.pre_seconds = 0
        if not self.node_agree or not 0 <= m.dtype < DT_COUNT or not m.error.empty():
            return 0
        nbytes = item_count(m[0]) * dtype_size(m.dtype)
        if nbytes == 0 or nbytes > shm_preload_room(&self.ctx.shm, self.ride.nwords):
            return 0
        if (m.collective == C_ALLGATHER and direct_whole(&self.ctx.shm, nbytes)
                and not read_way_slots(&self.ctx, nbytes, False)
                or m.collective == C_ALLTOALL and direct_parts(&self.ctx.shm, nbytes)
                and not read_way_slots(&self.ctx, nbytes, True)):
            return 0        # read from the sender's own buffer: one copy, not two (shm/copy.pyx)
        if m.collective == C_ALLREDUCE:
            if (not self.ctx.shm_ok or m.op == OP_ADASUM or nbytes > self.ctx.shm.redundant_max
                    or not (m.algorithm == ALG_SHM or m.algorithm == ALG_HIERARCHICAL
                            or m.algorithm == ALG_AUTO and auto_choice(
                                &self.ctx, nbytes, self.cache.metas[req.slot].apart) == ALG_SHM)):
                return 0        # (auto: where its pick, or the model's guess, is another)
            # the segment's copy-in, done before the call's timing: where a calibration may time
            # the call it is timed too and counts (resolved_done); elsewhere no clock is read
            timed = carry_timed(&self.ctx, nbytes, m.algorithm, self.cache.metas[req.slot].apart)
            if timed:
                t = hv_now()
            shm_preload(&self.ctx.shm, self.ride.nwords, 0, req.input, nbytes)
            if timed:
                while _carry_pause > 0 and hv_now() - t < _carry_pause:
                    hv_sleep(2e-4)  # (asleep, not spinning: with more ranks than cores a spin
                                    # spends the slice its peers' next step waits for)
                self.ctx.shm.pre_seconds = hv_now() - t
        elif m.collective == C_BROADCAST and self.node_copies and nbytes < SHM_COPY_MAX:
            shm_preload(&self.ctx.shm, self.ride.nwords, 0,
                        req.input if m.root == self.ctx.shm.me else NULL, nbytes)
        elif m.collective == C_ALLGATHER and self.node_copies:
            return shm_allgather_carry(&self.ctx.shm, self.ride.nwords, req.input, rows, nbytes)
        elif m.collective == C_REDUCESCATTER and self.node_copies and m.op != OP_ADASUM:
            return shm_reducescatter_carry(&self.ctx.shm, self.ride.nwords, req.input, rows,
                                           item_count(m[0]) // <size_t>rows, m.dtype)
        elif m.collective == C_ALLTOALL and self.node_copies:
            splits = req.splits         # as mpi_collectives' run_item takes them
            if splits.empty():
                splits.assign(self.ctx.size, rows // self.ctx.size)
            return shm_alltoall_carry(&self.ctx.shm, self.ride.nwords, req.input, rows, splits,
                                      nbytes // <size_t>rows)
        else:
            return 0
        return nbytes

    cdef int _ran_into_failure(self) noexcept nogil:
        """After a round's collectives: 1 (everything failed) when this rank failed alone in
        one or a peer was lost meanwhile, else 0."""
        if not self.failure.empty():
            self._die(E_FAILED, self.failure.c_str(), 0)
            return 1
        if self.watch.lost >= 0:
            self._die_err(b"", HV_ERR_LOST)
            return 1
        return 0

    cdef void _materialize(self, Request* req) noexcept nogil:
        """The express round's request joins the tables, as _take_now and _intake put any other
        request there (in flight by name, pending in its slot, stamped)."""
        req.submitted = hv_now()
        self.xreq = NULL
        hv_lock(&self.qmon)
        self.xname = NULL
        self.inflight.insert(req.name)
        hv_unlock(&self.qmon)
        self.pending[req.name] = req

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
            if req.slot >= 0 and now - req.submitted >= CONFLICT_SECONDS:
                # Long on a cached slot: the ranks may hold different variants of the name (an
                # odd rank's call can match another variant), and then no bit ever completes.
                # Rank 0 hears of it in full: it agrees, or reports the mismatch; a rank that
                # is only late costs one trip and the name's variants (_conflicts).
                req.slot = -1
                req.sent = False
            if req.slot >= 0:
                bits_mark_ready(bits, req.slot)
                if self.ride.at[req.slot] >= 0:
                    rides_board(&self.ride, self.ride.at[req.slot], req.input)
            elif not req.sent:
                misses = True
            if req.meta.collective != C_JOIN and req.submitted < oldest:
                oldest = req.submitted
        for s in self.invalid_slots:
            bits_mark_stale(bits, W, s)
        self.invalid_slots.clear()
        if self.ctx.rank == 0 and not self.table.entries.empty():
            self._conflicts(bits, W, now)
        if self.joined:     # ready for every cached allreduce; anything else must fail at rank 0
            for s in range(self.cache.capacity):
                if not self.cache.names[s].empty() and self.cache.metas[s].collective == C_ALLREDUCE:
                    bits_mark_ready(bits, s)
        stall = stall_due(&self.stall, now, oldest)
        bits_set_flags(bits, W, (0 if misses else FLAG_NO_MISSES) | (0 if stopping else FLAG_NOT_STOPPING) |
                       (0 if stall else FLAG_NO_STALL) | (FLAG_ALL_JOINED if self.joined else 0) |
                       (0 if self.tune.publish else FLAG_NO_TUNE) | (0 if self.joined else FLAG_NOT_JOINED))

    cdef void _conflicts(self, vector[uint64_t]& bits, int W, double now) noexcept nogil:
        """Rank 0: a name some ranks sent in full while it has cached variants. When ranks agree
        this is a new variant, and the others' copies arrive soon; when they disagree (one
        rank's call differs: a bug the user must hear of), the others hit a variant and wait
        on its bit. Rank 0 drops the name's variants everywhere, so everyone sends it in full
        and the mismatch is reported: at once when rank 0 itself waits on a variant, else
        once the name has waited CONFLICT_SECONDS (a lagging rank only costs the name's
        variants, relearned in one trip each, against a wait of CONFLICT_SECONDS). Ranks that
        hit different variants each give up their slot after CONFLICT_SECONDS (_vote)."""
        cdef const vector[int]* variants
        cdef size_t i
        for kv in self.table.entries:
            variants = cache_variants(&self.cache, kv.first)
            if variants == NULL:
                continue
            it = self.pending.find(kv.first)
            if ((it != self.pending.end() and deref(it).second.slot >= 0)
                    or now - kv.second.first_seen >= CONFLICT_SECONDS):
                for i in range(variants.size()):
                    bits_mark_stale(bits, W, deref(variants)[i])

    cdef void _cached(self, vector[uint64_t]& bits, int W, bint run, bint rides_ok,
                      vector[Item]& items) noexcept nogil:
        """Apply the agreed bits: slots some rank found stale are dropped everywhere (their
        requests go to rank 0 again); unless every rank has joined, slots ready everywhere
        become this round's first items, in slot order (those that rode in the agreement are
        done already, unless a rank has joined: its riding data were not real)."""
        cdef int s, w
        cdef uint64_t word
        cdef Item item
        for w in range(W):          # only the words' set bits: the cache may be large
            word = ~bits[W + w]
            while word:
                s = w * 64 + lowest_bit(word)
                word &= word - 1
                if s < self.cache.capacity and not self.cache.names[s].empty():
                    self._unslot(s)
                    cache_evict(&self.cache, s)
                    self.ride.dirty = True
        if not run:
            return
        for w in range(W):
            word = bits[w]
            while word:
                s = w * 64 + lowest_bit(word)
                word &= word - 1
                if s >= self.cache.capacity or self.cache.names[s].empty():
                    continue
                it = self.pending.find(self.cache.names[s])
                if it == self.pending.end() and not self.joined:
                    continue
                self._hit_item(&item, s, deref(it).second if it != self.pending.end() else NULL,
                               self.ride.at[s] if rides_ok else -1)
                items.push_back(item)

    cdef void _hit_item(self, Item* item, int s, Request* req, int ride) noexcept nogil:
        """The item of cached slot s, its agreed answer, for this round (_cached, _express).
        Assigned into an item that may be reused: its strings and vectors keep their room."""
        item.name.assign(self.cache.names[s])
        item.meta = self.cache.metas[s]
        item.req = req
        item.value = -1
        item.late.clear()
        item.err = 0
        item.ride = ride
        item.hit = True
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
        self.ctx.stamps = self.rec.on       # the phases' stamps only for the timeline
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
        """Misses to rank 0 and its answers back. Returns 0, 1 (stop after this round's work),
        2 (fatal stall: stop now) or 3 (a message could not be read: stop now, a rank failed)."""
        cdef string payload, resp
        cdef vector[char] gathered
        cdef vector[Span] spans
        cdef double now = hv_now()
        cdef int err
        cdef bint stopping_here
        self.slow_rounds += 1
        hv_lock(&self.qmon)
        stopping_here = self.stop_requested
        hv_unlock(&self.qmon)
        submission_message(payload, self.pending, stopping_here, self.joined, stall, now)
        err = exchange_gather(self.ctx.comm, self.ctx.rank, self.ctx.size, payload, gathered, spans)
        if not err and self.ctx.rank == 0:
            resp = controller_respond(&self.table, &self.cache, spans, now, self.clock, &self.stall)
            self._tune_tail(resp)
        if not err:
            err = exchange_bcast(self.ctx.comm, self.ctx.rank, resp)
        if err:
            self._die_err(b"negotiation failed: ", err)
            return 2
        return self._apply(resp, items, stopping)

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
            # a slot past the cache, or a broadcast's root past the set, would index memory
            # outside the tables or the segment: the response is malformed (a damaged peer)
            if not rd.bad and (not -1 <= a.slot < self.cache.capacity or (
                    a.status == RESP_OK and a.meta.collective == C_BROADCAST
                    and not 0 <= a.meta.root < self.ctx.size)):
                rd.bad = True
            if rd.bad:
                break
            self._take(a, items)
        get_tune(&rd, &tune)
        if rd.bad:
            self.dead_reason = malformed_response(rd.off, rd.n)
            return 3
        if tune.publish:
            self._tune_apply(tune.threshold, tune.cycle_ns)
        # requests whose slot was just handed to another name go back to rank 0
        for kv in self.pending:
            req = kv.second
            if req.slot >= 0 and (self.cache.names[req.slot] != req.name
                                  or not same_meta(self.cache.metas[req.slot], req.meta)):
                req.slot = -1
                req.sent = False
        if h.fatal:
            self.dead_reason = h.fatal_msg
            return 2 if h.fatal == FATAL_STALL else 3
        if stopping:
            self.dead_reason = shut_down(h.stopping)
            return 1
        return 0

    cdef void _take(self, Answer& a, vector[Item]& items) noexcept nogil:
        """One answer: store its cache slot, fail the request on a mismatch, else queue it."""
        cdef Item item
        it = self.pending.find(a.name)
        item.req = deref(it).second if it != self.pending.end() else NULL
        if item.req == NULL and not self.joined and a.status == RESP_OK:
            fprintf(stderr, b"hvlite: internal error: rank %d was answered for '%s', which it has not submitted\n",
                    self.ctx.rank, a.name.c_str())
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
        item.ride = -1
        item.hit = False
        items.push_back(item)

    cdef void _execute(self, vector[Item]& items) noexcept nogil:
        cdef Item* it
        cdef Request* req
        cdef size_t es, k
        cdef int err, c
        self.doing_at = -2
        for k in range(items.size()):
            if items[k].ride >= 0:
                rides_landed(&self.ride, &items[k], self.ctx.size)
                self.ridden += 1
        # Average divides by the set's size: a joined rank counts, contributing zeros (Horovod's rule)
        if items.size() != 1 or items[0].meta.collective == C_ALLREDUCE:     # (a lone other: none)
            run_allreduces(&self.ctx, &self.fusion, items, self.ctx.size)
        for k in range(items.size()):
            it = &items[k]
            req = it.req
            err = it.err
            c = it.meta.collective
            if not self.failure.empty():
                continue        # this rank failed alone: the rest fail with it (_step)
            if err == HV_ERR_NOMEM:
                self._fail_here(it)
                continue
            es = dtype_size(it.meta.dtype) if 0 <= it.meta.dtype < DT_COUNT else 1
            if c != C_ALLREDUCE:
                it.start = it.packed = hv_now() if self.ctx.stamps else 0
                self.doing_at = <int>k
                if self.node_copies and (c == C_ALLGATHER or c == C_ALLTOALL):
                    err = self._run_read(it, es)
                else:
                    err = run_item(self.ctx.comm, it, &self.ctx.shm if self.node_copies else NULL)
                it.ran = it.unpacked = hv_now() if self.ctx.stamps else 0
            if err == HV_ERR_NOMEM:
                self._fail_here(it)
                continue
            if err and err != HV_ERR_LOST and watch_peer_failed(&self.watch, 0.2):
                err = HV_ERR_LOST       # MPI's error is the failed peer's exit: say why it failed
            if req == NULL or err == HV_ERR_LOST:
                continue        # a lost peer: the round ends in _die_err, failing it with the rest
            if self.rec.on and self.ctx.stamps:     # (not switched on during the round)
                rec_item(&self.rec, it, req, item_count(req.meta) * es)
            if err:
                self._complete(req, ST_ERROR, E_MPI, string(b"MPI call failed: "), err)
            else:
                self._complete(req, ST_DONE, E_NONE, string(), 0)

    cdef int _run_read(self, Item* it, size_t es) noexcept nogil:
        """An allgather or alltoall through the node's segment, its large parts read from their
        senders or copied through the slots as its size class measured (dispatch.read_way). The
        agreed meta's size keys the class, so every rank times the same calls; parts that rode
        with the vote (agreed too) are in the slots already: nothing to choose or time (so a
        class that keeps the slots is confirmed only by its calls in rounds of several)."""
        cdef int err
        cdef bint alltoall = it.meta.collective == C_ALLTOALL
        cdef size_t nbytes = item_count(it.meta) * es
        cdef bint timed = self.ctx.shm.pre_epoch != self.ctx.shm.epoch
        if timed:
            self.ctx.shm.direct = read_way(&self.ctx, nbytes, alltoall,
                                           direct_parts(&self.ctx.shm, nbytes) if alltoall
                                           else direct_whole(&self.ctx.shm, nbytes))
        err = run_item(self.ctx.comm, it, &self.ctx.shm)
        self.ctx.shm.direct = self.ctx.direct_ok
        if timed:
            err = read_way_done(&self.ctx, err)
        return err

    cdef void _complete(self, Request* req, int status, int kind, string msg, int code) noexcept nogil:
        cdef bint orphan
        cdef char buf[512]
        cdef int blen = 0
        if kind == E_MPI and code != 0:
            blen = error_text(code, buf, 511)
            msg.append(buf, blen)
            req.error_code = code
        if req == self.xreq:        # the express round's: in no table
            req.error_kind = kind
            req.error = msg
            if req.held == NULL:    # a synchronous call's: no one else sees it
                hv_store(&req.status, status)
                return
            # A submitted one's (_express_queued), run by the thread that waits for it: that
            # wait lets go of its Pending (Pending.wait_c), not the sweep, so the completion
            # monitor is taken only for a second thread asleep on it (async then synchronize:
            # two lock pairs a call less)
            req.settled_here = True
            hv_store_sc(&req.status, status)
            if hv_load_sc(&self.sleepers) > 0:
                hv_lock(&self.dmon)
                hv_notify_all(&self.dmon)
                hv_unlock(&self.dmon)
            return
        hv_lock(&self.qmon)
        self.inflight.erase(req.name)
        hv_unlock(&self.qmon)
        self.pending.erase(req.name)
        hv_lock(&self.dmon)
        req.error_kind = kind
        req.error = msg
        orphan = req.orphan
        if not orphan and req.held != NULL:     # the next sweep lets go of its Pending
            self.ledger.completed.push_back(req)
            hv_store(&self.ledger.has_completed, 1)     # before the status: see Ledger.sweep
        hv_store(&req.status, status)
        hv_notify_all(&self.dmon)
        hv_unlock(&self.dmon)
        if orphan:
            free(req.result)
            del req

    cdef void _fail_here(self, Item* it) noexcept nogil:
        """This rank failed alone in the round (an allocation): tell every peer why, so that none
        waits for ever on it in this collective; _step then fails everything here with it."""
        self.failure = out_of_memory(it, <int64_t>nomem_bytes(), self._global(self.ctx.rank))
        watch_fail_all(&self.watch, self.failure.c_str())

    cdef int _global(self, int rank) noexcept nogil:
        return self.granks[rank] if 0 <= rank < <int>self.granks.size() else rank

    cdef void _die_err(self, const char* what, int code) noexcept nogil:
        """Stop for good after a failed MPI call; a lost peer is named with what was in flight."""
        cdef string why
        cdef int peer = self.watch.lost
        if code != HV_ERR_LOST or peer < 0:
            self._die(E_MPI, what, code)
        elif self.watch.failed >= 0:      # it told why: a failure of its own
            why = peer_failed(self._global(peer), doing(self.doing_items, self.doing_at, self.pending),
                              string(self.watch.fail_text))
            self._die(E_FAILED, why.c_str(), 0)
        else:
            why = peer_lost(self._global(peer), self.watch.lost_silence,
                            doing(self.doing_items, self.doing_at, self.pending))
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
