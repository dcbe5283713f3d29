from libc.stdint cimport int64_t
from mpi4py.libmpi cimport MPI_Comm, MPI_Request

# How a coordinator stays in touch with its peers while it waits (see liveness.pyx): a
# dedicated communicator for pings and their acknowledgements, who has not answered since when,
# and whether an idle coordinator has been asked to join a round.
cdef struct Watch:
    MPI_Comm ctl                 # MPI_COMM_NULL: no watch (every function is then a no-op)
    int rank, n
    double ping_after            # a wait this long starts pinging, one ping per peer per interval
    double lost_after            # a peer silent this long after a ping is lost
    double last_ping
    int64_t clock                # rounds this coordinator has agreed
    bint negotiating             # waiting in round clock + 1 (else running round clock's work)
    int64_t wanted               # the latest round a peer waits in (an idle coordinator joins it)
    double* silent_since         # per peer: when the oldest unanswered ping went out, 0 if none
    MPI_Request* ping_req        # per peer: the outstanding ping and acknowledgement sends
    MPI_Request* ack_req
    int64_t* ping_buf
    int64_t* ack_buf
    int lost                     # the first peer found lost, -1 while none
    double lost_silence
    int failed                   # the lost peer told of a failure of its own (FAILED), or -1
    char* fail_text              # FAIL_TEXT bytes: its reason, NUL-terminated
    char* fail_out               # FAIL_TEXT bytes: this rank's own reason, while it is sent
    MPI_Request* fail_req        # per peer: this rank's FAILED send
    int64_t* sent                # per peer: messages sent to it, and received from it
    int64_t* got
    bint quiet                   # quiesced: nothing of the watch is in flight any more
    # Waits on data nap once long instead of yielding (the set spans hosts): there the data
    # comes over a network, not from a peer that needs this core, and a thread that yields for
    # milliseconds per transfer takes the core from the ranks' compute (wait_all).
    bint naps
    # Peers on this node also beat in shared memory (watch_share_beats): a peer whose beat goes
    # on is alive, even when its messages do not get through (its MPI's buffers held by sends to
    # a stopped rank), so only the stopped one is named.
    char* beats                  # NULL, or the node's beat words, `beat_stride` bytes apart
    size_t beat_stride
    int* beat_slot               # per peer: its word's index on the node, or -1
    long long* beat_seen         # per peer: the beat last read

cdef int watch_init(Watch* w, MPI_Comm ctl, double ping_after, double lost_after) except -1
# `slots[i]`: peer i's index among the node's ranks, or -1; its beat word is at
# base + index * stride (memory every rank of the node maps). Call before the watch is used.
cdef int watch_share_beats(Watch* w, char* base, size_t stride, list slots) except -1
cdef void watch_free(Watch* w) noexcept nogil
# The watch of the calling thread's coordinator: waits deep inside an algorithm find it here.
cdef void watch_bind(Watch* w) noexcept nogil
cdef Watch* watch_current() noexcept nogil
# A wait on this thread starts: peers silent in an earlier wait are given a fresh chance.
cdef void watch_begin(Watch* w) noexcept nogil
# Answer peers' pings, and after `waited` >= ping_after ping every peer; returns the lost
# peer's rank (in the watched communicator), or -1.
cdef int watch_poll(Watch* w, double waited) noexcept nogil
# Collective over the watch's communicator, when every rank stops in the same round: receive
# every ping and acknowledgement still on the way and complete every send, so the communicator
# can be freed empty (MPI reuses a freed communicator's context: a late ping would land in the
# next one). Returns an MPI error code.
cdef int watch_quiesce(Watch* w) noexcept nogil
# Ping every peer now (a stopping coordinator wants everyone in its round at once).
cdef void watch_ping_all(Watch* w) noexcept nogil
# This rank failed on its own in a round (out of memory): tell every peer why. A peer waiting
# on it, or polling later, finds it lost at once (w.failed, w.fail_text) instead of waiting.
cdef void watch_fail_all(Watch* w, const char* why) noexcept nogil
# MPI_Waitall that stays in touch: spins (yielding after a while), polls the thread's watch once
# a wait has lasted a few milliseconds, and with `patient` sleeps between tests (waits on a late
# rank, not on data in transit); a data wait naps instead of yielding where the thread's watch
# says so (Watch.naps). Returns HV_ERR_LOST when the watch finds a peer lost.
cdef int wait_all(int count, MPI_Request* reqs, bint patient) noexcept nogil
# After an MPI error: whether a peer told of a failure of its own, looking for up to `grace`
# seconds (its notice may trail the error that another peer's exit caused; it was sent first).
cdef bint watch_peer_failed(Watch* w, double grace) noexcept nogil
