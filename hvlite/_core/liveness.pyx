"""Knowing that peers are alive without their cooperation beyond a running coordinator thread.

A coordinator only hears from its peers in rounds, and a round needs every rank: a rank whose
coordinator has nothing to do never joins one, so the others would wait on it for ever, and a
rank that stopped (SIGSTOP), exited without shutdown() or died looks exactly the same. So every
wait of a coordinator thread that lasts `ping_after` seconds pings every peer on a communicator of
its own, once per interval; every coordinator answers pings while it waits or idles, and an idle
one that is pinged for a round it has not joined joins it (so stall reports and shutdown need no
help from the user code of the missing rank). A peer that leaves a ping unanswered for
`lost_after` seconds is lost: the wait returns HV_ERR_LOST and the coordinator fails everything
naming that rank.

A rank that fails on its own inside a round (out of memory for a fused batch, say) sends every
peer its reason, tag FAILED (text, up to FAIL_TEXT bytes, not counted with the pings): a peer
waiting on it in the same collective would otherwise wait for ever, since the failed rank's
process is alive and answers pings. The peer's wait returns HV_ERR_LOST at once, naming it.

Messages: one int64 (the round the sender waits in), tag PING or ACK, received with Iprobe then
Recv from the probed source (a posted Irecv(ANY_SOURCE) can miss remote senders on some netmods).
A ping or acknowledgement to a peer whose previous one is still in transit is skipped, so a
stopped peer never accumulates sends.
"""
from libc.stdlib cimport calloc, free
from libc.string cimport strlen, memcpy
from libc.stdint cimport int64_t
from mpi4py.libmpi cimport *
from hvlite._core.codes cimport HV_ERR_LOST, HV_ERR_NOMEM
from hvlite._core.sync cimport hv_now, hv_sleep, hv_yield, hv_load64, hv_store64

cdef extern from *:
    """
    static __thread void* hv_watch_of_thread = 0;
    """
    void* hv_watch_of_thread

cdef enum:
    PING = 1
    ACK = 2
    FAILED = 3
    FAIL_TEXT = 1024        # bytes of a failure's reason, its NUL included
    QUICK = 64              # tests before the first yield
    POLL_AFTER_NS = 5000000 # a wait polls its watch once it has lasted 5 ms,
    POLL_EVERY_NS = 2000000 # then every 2 ms

# A data wait that naps (Watch.naps) sleeps this long between tests once it has lasted 200 us
# (about 70 us with the kernel's default timer slack): short against a transfer over a network,
# long enough to leave the core to compute.
cdef double DATA_NAP = 20e-6


cdef int watch_init(Watch* w, MPI_Comm ctl, double ping_after, double lost_after) except -1:
    cdef int i
    w.ctl = ctl
    w.rank = w.n = 0
    w.ping_after = ping_after
    w.lost_after = lost_after
    w.last_ping = 0
    w.clock = 0
    w.negotiating = False
    w.wanted = 0
    w.lost = -1
    w.lost_silence = 0
    w.failed = -1
    w.fail_text = w.fail_out = NULL
    w.fail_req = NULL
    w.silent_since = NULL
    w.ping_req = w.ack_req = NULL
    w.ping_buf = w.ack_buf = NULL
    w.sent = w.got = NULL
    w.beats = NULL
    w.beat_slot = NULL
    w.beat_seen = NULL
    w.beat_stride = 0
    w.quiet = False
    w.naps = False
    if ctl == MPI_COMM_NULL:
        return 0
    MPI_Comm_rank(ctl, &w.rank)
    MPI_Comm_size(ctl, &w.n)
    w.silent_since = <double*>calloc(w.n, sizeof(double))
    w.ping_req = <MPI_Request*>calloc(w.n, sizeof(MPI_Request))
    w.ack_req = <MPI_Request*>calloc(w.n, sizeof(MPI_Request))
    w.ping_buf = <int64_t*>calloc(w.n, sizeof(int64_t))
    w.ack_buf = <int64_t*>calloc(w.n, sizeof(int64_t))
    w.sent = <int64_t*>calloc(w.n, sizeof(int64_t))
    w.got = <int64_t*>calloc(w.n, sizeof(int64_t))
    w.fail_text = <char*>calloc(FAIL_TEXT, 1)
    w.fail_out = <char*>calloc(FAIL_TEXT, 1)
    w.fail_req = <MPI_Request*>calloc(w.n, sizeof(MPI_Request))
    if not (w.silent_since and w.ping_req and w.ack_req and w.ping_buf and w.ack_buf and w.sent
            and w.got and w.fail_text and w.fail_out and w.fail_req):
        watch_free(w)
        raise MemoryError("liveness watch")
    for i in range(w.n):
        w.ping_req[i] = MPI_REQUEST_NULL
        w.ack_req[i] = MPI_REQUEST_NULL
        w.fail_req[i] = MPI_REQUEST_NULL
    return 0


cdef int watch_share_beats(Watch* w, char* base, size_t stride, list slots) except -1:
    cdef int i
    if w.ctl == MPI_COMM_NULL or base == NULL or len(slots) != w.n or slots[w.rank] < 0:
        return 0
    w.beat_slot = <int*>calloc(w.n, sizeof(int))
    w.beat_seen = <long long*>calloc(w.n, sizeof(long long))
    if w.beat_slot == NULL or w.beat_seen == NULL:
        raise MemoryError("liveness watch")
    for i in range(w.n):
        w.beat_slot[i] = slots[i]
    w.beat_stride = stride
    w.beats = base
    return 0


cdef inline volatile long long* _beat(Watch* w, int peer) noexcept nogil:
    return <volatile long long*>(w.beats + <size_t>w.beat_slot[peer] * w.beat_stride)


cdef bint _beating(Watch* w, int peer) noexcept nogil:
    """Whether a peer on this node has beaten since its silence began (or this watch last
    looked)."""
    cdef long long b
    if w.beats == NULL or w.beat_slot[peer] < 0:
        return False
    b = hv_load64(_beat(w, peer))
    if b == w.beat_seen[peer]:
        return False
    w.beat_seen[peer] = b
    return True


cdef void _drop(MPI_Request* r) noexcept nogil:
    cdef int flag = 0
    if r[0] == MPI_REQUEST_NULL:
        return
    MPI_Test(r, &flag, MPI_STATUS_IGNORE)
    if not flag:            # a send to a peer that never took it (stopped or gone)
        MPI_Cancel(r)
        MPI_Request_free(r)
    r[0] = MPI_REQUEST_NULL


cdef void watch_free(Watch* w) noexcept nogil:
    global hv_watch_of_thread
    cdef int i
    if w.ping_req != NULL and w.ack_req != NULL:
        for i in range(w.n):
            _drop(&w.ping_req[i])
            _drop(&w.ack_req[i])
    if w.fail_req != NULL:
        for i in range(w.n):
            _drop(&w.fail_req[i])
    free(w.fail_req)
    free(w.fail_text)
    free(w.fail_out)
    w.fail_req = NULL
    w.fail_text = w.fail_out = NULL
    free(w.silent_since)
    free(w.ping_req)
    free(w.ack_req)
    free(w.ping_buf)
    free(w.ack_buf)
    free(w.sent)
    free(w.got)
    free(w.beat_slot)
    free(w.beat_seen)
    w.beats = NULL
    w.beat_slot = NULL
    w.beat_seen = NULL
    w.silent_since = NULL
    w.ping_req = w.ack_req = NULL
    w.ping_buf = w.ack_buf = NULL
    w.sent = w.got = NULL
    w.ctl = MPI_COMM_NULL
    if hv_watch_of_thread == <void*>w:
        hv_watch_of_thread = NULL


cdef void watch_bind(Watch* w) noexcept nogil:
    global hv_watch_of_thread
    hv_watch_of_thread = <void*>w


cdef Watch* watch_current() noexcept nogil:
    return <Watch*>hv_watch_of_thread


cdef void watch_begin(Watch* w) noexcept nogil:
    cdef int i
    if w == NULL or w.ctl == MPI_COMM_NULL:
        return
    for i in range(w.n):
        w.silent_since[i] = 0


cdef bint _free_slot(MPI_Request* r) noexcept nogil:
    """Whether the previous send through this slot has completed (or there was none)."""
    cdef int flag = 1
    if r[0] != MPI_REQUEST_NULL:
        MPI_Test(r, &flag, MPI_STATUS_IGNORE)
    return flag != 0


cdef void _send(Watch* w, int peer, int tag, MPI_Request* req, int64_t* buf) noexcept nogil:
    if _free_slot(req):
        buf[0] = w.clock + (1 if w.negotiating else 0)
        if MPI_Isend(buf, 1, MPI_INT64_T, peer, tag, w.ctl, req) == MPI_SUCCESS:
            w.sent[peer] += 1


cdef void _failed_peer(Watch* w, MPI_Status* st) noexcept nogil:
    """A FAILED message: the peer's reason, and the peer taken as lost."""
    cdef int count = 0
    cdef char spare[FAIL_TEXT]                  # a second notice: read, not kept
    cdef char* into = w.fail_text if w.failed < 0 else spare
    MPI_Get_count(st, MPI_CHAR, &count)
    if count < 0 or count > FAIL_TEXT:     # not this protocol's: read it, keep nothing
        count = 0
    if MPI_Recv(into if count else NULL, count, MPI_CHAR, st.MPI_SOURCE, FAILED, w.ctl,
                MPI_STATUS_IGNORE):
        return
    if w.failed >= 0:
        return
    w.fail_text[FAIL_TEXT - 1] = 0
    if count < FAIL_TEXT:
        w.fail_text[count] = 0
    w.failed = st.MPI_SOURCE
    if w.lost < 0:
        w.lost = st.MPI_SOURCE
        w.lost_silence = 0


cdef void watch_fail_all(Watch* w, const char* why) noexcept nogil:
    cdef int i
    cdef size_t n
    if w == NULL or w.ctl == MPI_COMM_NULL:
        return
    n = strlen(why)
    if n > FAIL_TEXT - 1:
        n = FAIL_TEXT - 1
    memcpy(w.fail_out, why, n)
    w.fail_out[n] = 0
    for i in range(w.n):
        if i != w.rank and w.fail_req[i] == MPI_REQUEST_NULL:
            MPI_Isend(w.fail_out, <int>(n + 1), MPI_CHAR, i, FAILED, w.ctl, &w.fail_req[i])
    # the process may end soon after (its error raised, the script gone): let the sends go out
    # (small: MPI sends them eagerly), 2 s at most for a peer that takes nothing
    cdef double until = hv_now() + 2.0
    cdef int done = 0
    while hv_now() < until:
        if MPI_Testall(w.n, w.fail_req, &done, MPI_STATUSES_IGNORE) or done:
            break
        hv_sleep(1e-4)


cdef void _answer(Watch* w) noexcept nogil:
    """Receive every ping and acknowledgement waiting; acknowledge pings."""
    cdef int flag = 1
    cdef MPI_Status st
    cdef int64_t value
    while True:
        flag = 0
        if MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, w.ctl, &flag, &st) or not flag:
            return
        if st.MPI_TAG == FAILED:
            _failed_peer(w, &st)
            continue
        if MPI_Recv(&value, 1, MPI_INT64_T, st.MPI_SOURCE, st.MPI_TAG, w.ctl, MPI_STATUS_IGNORE):
            return
        w.got[st.MPI_SOURCE] += 1
        w.silent_since[st.MPI_SOURCE] = 0     # any message shows the peer is alive
        if st.MPI_TAG == PING:
            if value > w.wanted:
                w.wanted = value
            _send(w, st.MPI_SOURCE, ACK, &w.ack_req[st.MPI_SOURCE], &w.ack_buf[st.MPI_SOURCE])


cdef int watch_quiesce(Watch* w) noexcept nogil:
    cdef int i, err
    cdef int64_t value
    cdef int64_t* expect
    if w.ctl == MPI_COMM_NULL or w.quiet:
        return 0
    expect = <int64_t*>calloc(w.n, sizeof(int64_t))
    if expect == NULL:
        return HV_ERR_NOMEM
    err = MPI_Alltoall(w.sent, 1, MPI_INT64_T, expect, 1, MPI_INT64_T, w.ctl)
    for i in range(w.n):
        while not err and w.got[i] < expect[i]:     # unanswered: everyone is stopping
            err = MPI_Recv(&value, 1, MPI_INT64_T, i, MPI_ANY_TAG, w.ctl, MPI_STATUS_IGNORE)
            w.got[i] += 1
    free(expect)
    for i in range(w.n):
        if not err and w.ping_req[i] != MPI_REQUEST_NULL:
            err = MPI_Wait(&w.ping_req[i], MPI_STATUS_IGNORE)
        if not err and w.ack_req[i] != MPI_REQUEST_NULL:
            err = MPI_Wait(&w.ack_req[i], MPI_STATUS_IGNORE)
    w.quiet = err == 0
    return err


cdef void watch_ping_all(Watch* w) noexcept nogil:
    cdef int i
    cdef double now = hv_now()
    if w == NULL or w.ctl == MPI_COMM_NULL:
        return
    w.last_ping = now
    for i in range(w.n):
        if i != w.rank:
            if w.silent_since[i] == 0:
                w.silent_since[i] = now
                if w.beats != NULL and w.beat_slot[i] >= 0:
                    w.beat_seen[i] = hv_load64(_beat(w, i))
            _send(w, i, PING, &w.ping_req[i], &w.ping_buf[i])


cdef int watch_poll(Watch* w, double waited) noexcept nogil:
    cdef int i
    cdef double now
    if w == NULL or w.ctl == MPI_COMM_NULL:
        return -1
    if w.lost >= 0:
        return w.lost
    if w.beats != NULL:
        hv_store64(_beat(w, w.rank), hv_load64(_beat(w, w.rank)) + 1)     # only this rank writes it
    _answer(w)
    if w.lost >= 0:             # a peer told of its own failure
        return w.lost
    if waited < w.ping_after:
        return -1
    now = hv_now()
    if now - w.last_ping >= w.ping_after:
        watch_ping_all(w)
    for i in range(w.n):
        if w.silent_since[i] > 0 and now - w.silent_since[i] >= w.lost_after and _beating(w, i):
            w.silent_since[i] = now         # silent on MPI, but its process goes on
        if w.silent_since[i] > 0 and now - w.silent_since[i] >= w.lost_after:
            w.lost = i
            w.lost_silence = now - w.silent_since[i]
            return i
    return -1


cdef int wait_all(int count, MPI_Request* reqs, bint patient) noexcept nogil:
    cdef int flag = 0, err, tests = 0
    cdef Watch* w = watch_current()
    cdef double t0 = 0, now, next_poll = 0, pause = 10e-6
    while True:
        err = MPI_Testall(count, reqs, &flag, MPI_STATUSES_IGNORE)
        if err or flag:
            return err
        tests += 1
        if tests < QUICK:
            continue
        now = hv_now()
        if tests == QUICK:
            t0 = now
            next_poll = now + POLL_AFTER_NS * 1e-9
            watch_begin(w)
        if now >= next_poll:
            next_poll = now + POLL_EVERY_NS * 1e-9
            if watch_poll(w, now - t0) >= 0:
                return HV_ERR_LOST
        if now - t0 < 200e-6 or not (patient or (w != NULL and w.naps)):
            hv_yield()
        elif patient:
            hv_sleep(pause)
            pause = pause * 2 if pause < 1e-3 else 1e-3
        else:
            hv_sleep(DATA_NAP)


cdef bint watch_peer_failed(Watch* w, double grace) noexcept nogil:
    cdef double until = hv_now() + grace
    if w.ctl == MPI_COMM_NULL:
        return False
    while w.failed < 0 and hv_now() < until:
        watch_poll(w, 0.0)
        if w.failed < 0:
            hv_sleep(1e-3)
    return w.failed >= 0
