"""Transfers for the parameter server: polled point-to-point on the PS's own communicator.

Every wait tests its requests without the GIL, spinning briefly, then yielding, then sleeping up
to 1 ms between tests, so a rank waiting on a straggler leaves the cores to the ranks computing
(runs have more ranks than cores). Waits give up after `timeout` seconds (0: never) with
PSTimeout, so a vanished peer is an error rather than a hang. The server loop's decisions are
made in Python (hvlite.ps.server); only the waiting and the copying happen here.
"""
from libc.stdint cimport int64_t
from libc.limits cimport INT_MAX
import numpy as np
from libc.stdlib cimport malloc, free
cimport numpy as cnp
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport *
from hvlite._core.codes cimport check, HV_ERR_TIMEOUT as PS_TIMEOUT

cnp.import_array()

from hvlite._core.sync cimport hv_now, hv_sleep, hv_yield, hv_backoff, hv_backoff_init, hv_backoff_step

cdef enum:
    HEADER = 4
    MAX_MESSAGE = 2147483647

# tags: worker -> server control/data, server -> worker replies/data, abort text, final exchange
TAG_CTRL = 11
TAG_PUSH = 12
TAG_REPLY = 13
TAG_PARAMS = 14
TAG_TEXT = 15
ANY_SOURCE = MPI_ANY_SOURCE


class PSTimeout(Exception):
    """A wait ran past the link's timeout."""


cdef int _poll(MPI_Request* reqs, int n, MPI_Status* st, double timeout) noexcept nogil:
    """Test until every request completed (statuses into st if not NULL)."""
    cdef int flag = 0, err
    cdef hv_backoff b
    hv_backoff_init(&b)
    while True:
        if st == NULL:
            err = MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE)
        else:
            err = MPI_Testall(n, reqs, &flag, st)
        if err or flag:
            return err
        if hv_backoff_step(&b) > timeout > 0:
            return PS_TIMEOUT


cdef int _probe(MPI_Comm comm, int tag, MPI_Status* st, double timeout) noexcept nogil:
    """Poll Iprobe(ANY_SOURCE, tag) until a message is waiting (its envelope into st)."""
    cdef int flag = 0, err
    cdef hv_backoff b
    hv_backoff_init(&b)
    while True:
        err = MPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &flag, st)
        if err or flag:
            return err
        if hv_backoff_step(&b) > timeout > 0:
            return PS_TIMEOUT


cdef int _check(int err, what) except -1:
    if err == 0:
        return 0
    if err == PS_TIMEOUT:
        raise PSTimeout(what)
    return check(err, what)


cdef int _whole(MPI_Status* st, size_t expected, int tag) except -1:
    """A received message filled the buffer: a shorter one (a damaged or mistaken peer) would
    leave the rest of the buffer as it was, read as data (a longer one fails in MPI)."""
    cdef int count = -1
    MPI_Get_count(st, MPI_BYTE, &count)
    if count < 0 or <size_t>count != expected:
        raise ValueError(f"hvlite.ps: rank {st.MPI_SOURCE} sent {count} bytes (tag {tag}) "
                         f"where {expected} were expected")
    return 0


cdef char* _data(cnp.ndarray a, size_t* nbytes) except NULL:
    if not cnp.PyArray_IS_C_CONTIGUOUS(a):
        raise ValueError("hvlite.ps: buffers must be C-contiguous")
    nbytes[0] = <size_t>cnp.PyArray_NBYTES(a)
    if nbytes[0] > MAX_MESSAGE:
        raise ValueError(f"hvlite.ps: a message of {nbytes[0]} bytes exceeds 2 GiB; use more servers")
    return <char*>cnp.PyArray_DATA(a) if nbytes[0] else <char*>&nbytes[0]


cdef class _Send:
    cdef MPI_Request req
    cdef object keep


cdef class Link:
    """The PS communicator; `pending` holds sends not yet known to be complete."""
    cdef MPI_Comm comm
    cdef readonly double timeout
    cdef list pending

    def __init__(self, comm, double timeout):
        self.comm = (<MPI.Comm>comm).ob_mpi
        self.timeout = timeout
        self.pending = []

    def isend(self, cnp.ndarray buf, int dest, int tag):
        """Start sending buf (kept alive until the send completes)."""
        cdef size_t n
        cdef char* p = _data(buf, &n)
        cdef _Send s = _Send()
        s.keep = buf
        _check(MPI_Isend(p, <int>n, MPI_BYTE, dest, tag, self.comm, &s.req), f"send to rank {dest}")
        self.pending.append(s)

    def reap(self):
        """Forget the sends that completed; returns how many are still in flight."""
        cdef _Send s
        cdef int flag
        keep = []
        for s in self.pending:
            flag = 0
            _check(MPI_Test(&s.req, &flag, MPI_STATUS_IGNORE), "send")
            if not flag:
                keep.append(s)
        self.pending = keep
        return len(keep)

    def drain(self, double timeout=-1):
        """Wait (without the GIL) until every started send has completed."""
        cdef int n = len(self.pending), i, err
        cdef _Send s
        if n == 0:
            return
        cdef MPI_Request* reqs = <MPI_Request*>malloc(n * sizeof(MPI_Request))
        for i in range(n):
            reqs[i] = (<_Send>self.pending[i]).req
        if timeout < 0:
            timeout = self.timeout
        with nogil:
            err = _poll(reqs, n, NULL, timeout)
        free(reqs)
        if err == 0:
            self.pending = []
        _check(err, "sends still in flight")

    def recv(self, cnp.ndarray buf, int src, int tag, double timeout=-1):
        """Receive into buf from src; returns the sender. ANY_SOURCE is probed for first, then
        received from the sender found: a polled Irecv(MPI_ANY_SOURCE) can miss a remote
        sender's message for good under MPICH's ucx netmod when a peer shares the receiver's host
        (a parameter server hung across hosts), while Iprobe(ANY_SOURCE) sees it."""
        cdef size_t n
        cdef char* p = _data(buf, &n)
        cdef MPI_Request req
        cdef MPI_Status st
        cdef int err
        if timeout < 0:
            timeout = self.timeout
        if src == MPI_ANY_SOURCE:
            with nogil:
                err = _probe(self.comm, tag, &st, timeout)
            _check(err, "waiting for any rank")
            src = st.MPI_SOURCE
        _check(MPI_Irecv(p, <int>n, MPI_BYTE, src, tag, self.comm, &req), f"receive from {src}")
        with nogil:
            err = _poll(&req, 1, &st, timeout)
        if err == PS_TIMEOUT:
            MPI_Cancel(&req)
            MPI_Wait(&req, MPI_STATUS_IGNORE)
        _check(err, f"waiting for rank {src}")
        _whole(&st, n, tag)
        return st.MPI_SOURCE

    def recv_all(self, list bufs, list srcs, int tag):
        """Receive bufs[i] from srcs[i], all at once."""
        cdef int n = len(bufs), i, err = 0
        cdef size_t nb
        cdef char* p
        cdef MPI_Request* reqs = <MPI_Request*>malloc(n * sizeof(MPI_Request))
        cdef MPI_Status* sts = <MPI_Status*>malloc(n * sizeof(MPI_Status))
        try:
            if n and (reqs == NULL or sts == NULL):
                raise MemoryError()
            for i in range(n):
                p = _data(bufs[i], &nb)
                _check(MPI_Irecv(p, <int>nb, MPI_BYTE, srcs[i], tag, self.comm, &reqs[i]),
                       f"receive from {srcs[i]}")
            with nogil:
                err = _poll(reqs, n, sts, self.timeout)
            _check(err, f"waiting for ranks {srcs}")
            for i in range(n):
                _whole(&sts[i], <size_t>cnp.PyArray_NBYTES(bufs[i]), tag)
        finally:
            free(reqs)
            free(sts)

    def probe(self, int src, int tag):
        """Whether a message from src with tag is waiting (no wait)."""
        cdef int flag = 0
        cdef MPI_Status st
        _check(MPI_Iprobe(src, tag, self.comm, &flag, &st), "probe")
        return st.MPI_SOURCE if flag else None

    def recv_bytes(self, int src, int tag, double timeout=-1):
        """A message of unknown length (an error text), as bytes."""
        cdef int flag = 0, err = 0, count = 0
        cdef MPI_Status st
        cdef double t0 = hv_now()
        if timeout < 0:
            timeout = self.timeout
        with nogil:
            while True:
                err = MPI_Iprobe(src, tag, self.comm, &flag, &st)
                if err or flag:
                    break
                if timeout > 0 and hv_now() - t0 > timeout:
                    err = PS_TIMEOUT
                    break
                hv_sleep(100e-6)
        _check(err, f"waiting for a message from rank {src}")
        MPI_Get_count(&st, MPI_BYTE, &count)
        if count < 0:       # MPI_UNDEFINED: not a whole number of bytes
            raise ValueError(f"hvlite.ps: a message from rank {st.MPI_SOURCE} has no byte count")
        buf = cnp.PyArray_ZEROS(1, [count], cnp.NPY_UINT8, 0)
        self.recv(buf, st.MPI_SOURCE, tag)
        return bytes(buf)

    def allgather_bytes(self, bytes data):
        """Every rank's `data`, in rank order (MPI_Iallgather(v), polled without the GIL)."""
        cdef int size = 0, i, err
        MPI_Comm_size(self.comm, &size)
        cdef cnp.ndarray lens = cnp.PyArray_ZEROS(1, [size], cnp.NPY_INT32, 0)
        cdef int mine = len(data) if len(data) <= INT_MAX else -1     # -1: too long, said to all
        cdef MPI_Request req
        _check(MPI_Iallgather(&mine, 1, MPI_INT, cnp.PyArray_DATA(lens), 1, MPI_INT, self.comm, &req),
               "allgather")
        with nogil:
            err = _poll(&req, 1, NULL, self.timeout)
        _check(err, "final exchange (lengths)")
        offsets, total = gather_layout([int(v) for v in lens])     # every rank raises alike
        cdef cnp.ndarray displs = np.asarray(offsets, dtype=np.int32)
        cdef cnp.ndarray out = cnp.PyArray_ZEROS(1, [max(total, 1)], cnp.NPY_UINT8, 0)
        cdef const char* src = data
        _check(MPI_Iallgatherv(<void*>src, mine, MPI_BYTE, cnp.PyArray_DATA(out),
                               <int*>cnp.PyArray_DATA(lens), <int*>cnp.PyArray_DATA(displs),
                               MPI_BYTE, self.comm, &req), "allgatherv")
        with nogil:
            err = _poll(&req, 1, NULL, self.timeout)
        _check(err, "final exchange")
        raw = bytes(out)
        return [raw[displs[i]:displs[i] + lens[i]] for i in range(size)]


def gather_layout(lens):
    """Each rank's offset in an allgather of byte strings of these lengths, and the total: in
    Python integers, so a sum past 2 GiB cannot wrap into an undersized buffer. A negative length
    (a rank whose string is longer than INT_MAX says -1) or a total past INT_MAX (MPI's int
    displacements) is refused, naming the ranks, on every rank alike."""
    bad = [r for r, v in enumerate(lens) if v < 0]
    if bad:
        raise ValueError(f"hvlite.ps: ranks {bad} have more than {INT_MAX} bytes to gather; "
                         "MPI's counts are int")
    offsets, total = [], 0
    for v in lens:
        offsets.append(total)
        total += v
    if total > INT_MAX:
        raise ValueError(f"hvlite.ps: the gathered strings add up to {total} bytes, past "
                         f"{INT_MAX} (MPI's displacements are int): gather less at a time")
    return offsets, total


def header(int kind, int64_t a=0, int64_t b=0, int64_t c=0):
    """A control message: kind and three integers."""
    cdef cnp.ndarray h = cnp.PyArray_ZEROS(1, [HEADER], cnp.NPY_INT64, 0)
    cdef int64_t* p = <int64_t*>cnp.PyArray_DATA(h)
    p[0], p[1], p[2], p[3] = kind, a, b, c
    return h


def now():
    return hv_now()


def serve_loop(Link link, handler):
    """The server's loop: wait (without the GIL) for the next control message from any rank and
    hand it to handler.on_message(source, header); stop when that returns False."""
    cdef cnp.ndarray h = cnp.PyArray_ZEROS(1, [HEADER], cnp.NPY_INT64, 0)
    while True:
        src = link.recv(h, MPI_ANY_SOURCE, TAG_CTRL)
        if not handler.on_message(src, h.copy()):
            return
