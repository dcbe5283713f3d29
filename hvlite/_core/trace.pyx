"""Chrome trace output (the JSON array format Perfetto and chrome://tracing read).

One row (tid) per tensor name, a "compute" row for the user's spans and a "coordinator" row for
round markers; pid is the rank. A request becomes nested "X" events:
<COLLECTIVE> (submit to done) containing NEGOTIATE_<COLLECTIVE> (submit to ready everywhere),
QUEUE (ready to its batch's start), MEMCPY_IN_FUSION_BUFFER, the operation that ran
(RING_ALLREDUCE, ..., or MPI_ALLGATHER, MPI_BROADCAST, ...), MEMCPY_OUT_FUSION_BUFFER. The array is left open and
every flush ends on a complete event, so a killed process still leaves a file the viewers load;
stop writes the closing bracket.
"""
# distutils: language = c++
from libc.stdio cimport fopen, fclose, fwrite, fflush, snprintf
from libc.errno cimport errno, EIO
from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from hvlite._core.request cimport *
from hvlite._core.codes cimport *
from cython.operator cimport dereference as deref

cdef extern from "stdio.h" nogil:
    ctypedef struct FILE

cdef const char* KINDS[7]
KINDS[:] = [b"ALLREDUCE", b"ALLGATHER", b"BROADCAST", b"ALLTOALL", b"REDUCESCATTER", b"BARRIER", b"JOIN"]
cdef const char* ALGOS[8]
ALGOS[:] = [b"AUTO", b"RING", b"RHD", b"TREE", b"HIERARCHICAL", b"MPI", b"RD", b"SHM"]
cdef const char* DTYPES[14]
DTYPES[:] = [b"float16", b"bfloat16", b"float32", b"float64", b"int8", b"uint8", b"int16",
             b"uint16", b"int32", b"uint32", b"int64", b"uint64", b"float32 as float16",
             b"float32 as bfloat16"]


cdef const char* _pick(const char** table, int n, int i) noexcept nogil:
    if 0 <= i < n:
        return table[i]
    return b"-"


cdef void rec_init(Recorder* r) noexcept nogil:
    hv_monitor_init(&r.mon)
    r.on = False
    r.f = NULL
    r.next_tid = 2


cdef void rec_push(Recorder* r, TEvent& e) noexcept nogil:
    hv_lock(&r.mon)
    if r.on:
        r.events.push_back(e)
    hv_unlock(&r.mon)


cdef void _json_str(string& out, const string& s) noexcept nogil:
    cdef size_t i
    cdef char c
    out.push_back(b'"')
    for i in range(s.size()):
        c = s[i]
        if c == b'"' or c == b'\\':
            out.push_back(b'\\')
            out.push_back(c)
        elif <unsigned char>c < 0x20:
            out.push_back(b' ')
        else:
            out.push_back(c)
    out.push_back(b'"')


cdef void _meta(Recorder* r, string& out, int tid, const string& label) noexcept nogil:
    cdef char buf[128]
    cdef int k = snprintf(buf, 128, '{"name":"thread_name","ph":"M","pid":%d,"tid":%d,"args":{"name":',
                          r.pid, tid)
    out.append(buf, k)
    _json_str(out, label)
    out.append(b'}},\n')
    k = snprintf(buf, 128, '{"name":"thread_sort_index","ph":"M","pid":%d,"tid":%d,"args":{"sort_index":%d}},\n',
                 r.pid, tid, tid)
    out.append(buf, k)


cdef void _x(Recorder* r, string& out, const char* name, int tid, double t0, double t1,
             const string& args) noexcept nogil:
    cdef char buf[160]
    cdef double ts = (t0 - r.origin) * 1e6, dur = (t1 - t0) * 1e6
    if dur < 0:
        dur = 0
    out.append(b'{"name":')
    _json_str(out, string(name))        # any length, escaped: a user's span name is not trusted
    cdef int k = snprintf(buf, 160, ',"ph":"X","ts":%.3f,"dur":%.3f,"pid":%d,"tid":%d',
                          ts, dur, r.pid, tid)
    out.append(buf, k if 0 <= k < 160 else 0)
    if not args.empty():
        out.append(b',"args":')
        out.append(args)
    out.append(b'},\n')


cdef int _tid(Recorder* r, string& out, const string& name) noexcept nogil:
    it = r.tids.find(name)
    if it != r.tids.end():
        return deref(it).second
    cdef int tid = r.next_tid
    r.next_tid += 1
    r.tids[name] = tid
    _meta(r, out, tid, name)
    return tid


cdef void _format(Recorder* r, string& out, TEvent& e) noexcept nogil:
    cdef char buf[256]
    cdef char opname[64]
    cdef string args
    cdef int tid, k
    if e.kind == K_SPAN:
        tid = 0 if e.row.empty() else _tid(r, out, e.row)
        _x(r, out, e.name.c_str(), tid, e.start, e.done, e.args)
        return
    if e.kind == K_CYCLE:
        k = snprintf(buf, 256, '{"name":"CYCLE","ph":"i","s":"t","ts":%.3f,"pid":%d,"tid":1},\n',
                     (e.start - r.origin) * 1e6, r.pid)
        out.append(buf, k)
        return
    if e.kind < 0 or e.kind > 6:
        return
    tid = _tid(r, out, e.name)
    args = string(b'{"tensor":')
    _json_str(args, e.name)
    k = snprintf(buf, 256, ',"bytes":%lld,"dtype":"%s","fused":%d', <long long>e.nbytes,
                 _pick(DTYPES, 14, e.dtype), e.fused)
    args.append(buf, k)
    if e.kind == 0:
        k = snprintf(buf, 256, ',"algorithm":"%s"', _pick(ALGOS, 8, e.algorithm))
        args.append(buf, k)
    args.push_back(b'}')
    _x(r, out, KINDS[e.kind], tid, e.submitted, e.done, args)      # the outer event
    snprintf(opname, 64, "NEGOTIATE_%s", KINDS[e.kind])
    args.clear()
    if not e.late.empty():
        args.append(b'{"late_ranks":[')
        args.append(e.late)
        args.append(b']}')
    _x(r, out, opname, tid, e.submitted, e.ready, args)
    args.clear()
    _x(r, out, b"QUEUE", tid, e.ready, e.start, args)
    # Fused through the shared segment, packing and unpacking are part of the pipelined
    # operation (it records no time for them): then there are no copy phases to show.
    cdef bint copies = e.fused > 1 and not (e.packed == e.start and e.unpacked == e.ran)
    if copies:
        _x(r, out, b"MEMCPY_IN_FUSION_BUFFER", tid, e.start, e.packed, args)
    if e.kind == 0:
        snprintf(opname, 64, "%s_ALLREDUCE", _pick(ALGOS, 8, e.algorithm))
        _x(r, out, opname, tid, e.packed, e.ran, args)
    else:       # the other collectives run on MPI's own implementations
        snprintf(opname, 64, "MPI_%s", KINDS[e.kind])
        _x(r, out, opname, tid, e.packed, e.ran, args)
    if copies:
        _x(r, out, b"MEMCPY_OUT_FUSION_BUFFER", tid, e.ran, e.unpacked, args)


cdef void rec_item(Recorder* r, Item* it, Request* req, size_t nbytes) noexcept nogil:
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
    rec_push(r, e)


cdef bint _write(Recorder* r, const char* data, size_t n) noexcept nogil:
    """Write and flush; on the first failure (a full disk, a size limit) remember errno and stop
    recording: what follows would be lost too, and the trace stays whole up to here."""
    if r.err:
        return False
    if fwrite(data, 1, n, r.f) != n or fflush(r.f) != 0:
        r.err = errno or EIO
        hv_lock(&r.mon)
        r.on = False
        hv_unlock(&r.mon)
        return False
    return True


cdef class Writer:
    """The file side of a Recorder, driven by hvlite.timeline's writer thread."""

    def open(self, path, int pid, double origin, bint mark_cycles):
        cdef string p = path.encode()
        cdef string out
        cdef FILE* f = fopen(p.c_str(), b"w")
        if f == NULL:
            raise OSError(f"hvlite timeline: cannot open {path!r} for writing")
        hv_lock(&self.r.mon)
        self.r.f = f
        self.r.pid = pid
        self.r.origin = origin
        self.r.mark_cycles = mark_cycles
        self.r.tids.clear()
        self.r.next_tid = 2
        self.r.written = 0
        self.r.events.clear()
        self.r.on = True
        hv_unlock(&self.r.mon)
        out.append(b'[\n')
        cdef char buf[160]
        cdef int k = snprintf(buf, 160, '{"name":"process_name","ph":"M","pid":%d,"args":{"name":"rank %d"}},\n', pid, pid)
        out.append(buf, k)
        k = snprintf(buf, 160, '{"name":"process_sort_index","ph":"M","pid":%d,"args":{"sort_index":%d}},\n', pid, pid)
        out.append(buf, k)
        _meta(self.r, out, 0, string(b"compute"))
        _meta(self.r, out, 1, string(b"coordinator"))
        self.r.err = 0
        _write(self.r, out.data(), out.size())
        if self.r.err:
            import os
            fclose(f)
            self.r.f = NULL
            raise OSError(self.r.err, f"hvlite timeline: cannot write {path!r}: "
                                      f"{os.strerror(self.r.err)}")

    def flush(self):
        """Format and write what was recorded since the last flush (without the GIL)."""
        cdef vector[TEvent] batch
        cdef string out
        cdef size_t i
        with nogil:
            hv_lock(&self.r.mon)
            batch.swap(self.r.events)
            hv_unlock(&self.r.mon)
            if self.r.f != NULL and batch.size():
                for i in range(batch.size()):
                    _format(self.r, out, batch[i])
                if _write(self.r, out.data(), out.size()):
                    self.r.written += batch.size()
        return batch.size()

    def close(self):
        """Stop recording, write what is left and the closing bracket."""
        hv_lock(&self.r.mon)
        self.r.on = False
        hv_unlock(&self.r.mon)
        self.flush()
        cdef char buf[128]
        cdef int k
        if self.r.f != NULL:
            k = snprintf(buf, 128, '{"name":"timeline_end","ph":"i","s":"g","ts":0,"pid":%d,"tid":1}\n]\n', self.r.pid)
            if not self.r.err:
                _write(self.r, buf, k)
            if fclose(self.r.f) != 0 and not self.r.err:
                self.r.err = errno or EIO
            self.r.f = NULL

    def span(self, name, double start, double end, row=None, args=None):
        """A span on the compute row, or on tensor `row`'s row; `args`: JSON object text."""
        cdef TEvent e
        e.name = name.encode()
        e.kind = K_SPAN
        if row is not None:
            e.row = row.encode()
        if args is not None:
            e.args = args.encode()
        e.start = start
        e.done = end
        rec_push(self.r, e)

    @property
    def error(self):
        """The first failed write's errno (recording stopped there), or 0."""
        return self.r.err

    @property
    def recording(self):
        return self.r.on

    def pause(self, bint paused):
        """Stop or resume recording without closing the file (benchmarks compare on and off)."""
        hv_lock(&self.r.mon)
        self.r.on = not paused and self.r.f != NULL
        hv_unlock(&self.r.mon)


def now():
    """The coordinator's clock (monotonic seconds): user spans use it too."""
    return hv_now()


cdef Writer make_writer(Recorder* r):
    cdef Writer w = Writer.__new__(Writer)
    w.r = r
    return w
