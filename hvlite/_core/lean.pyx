"""The lean face of the commonest calls: an all-reduce of a plain NumPy array on the global set,
checked and submitted in one C call; and so the other synchronous collectives (broadcast,
allgather, alltoall in equal parts, reducescatter, barrier).

The Python front's checks, frames and options object were most of a small call's cost (0.7 of
1.9 us on one rank), and more when its code and data are cold, as a training step's first call
after compute finds them (docs/benchmarks.md, "A call after compute"). Here the checks read the
array's C fields, the op's integer value and a table by NumPy type number. Anything this face
does not take (another array kind, layout or set, a name that is not a str, an op it does not
run, an unknown algorithm) it leaves to the general path by returning None, and that path
checks, names the problem on every rank and poisons as usual. So does an output it cannot
allocate, before it takes an automatic name: once the face has taken a call, nothing can fail
on this rank alone."""
# distutils: language = c++
import numpy as np
cimport numpy as cnp
from cpython.long cimport PyLong_AsLong
from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject, Py_REFCNT
from hvlite._core.codes cimport *
from hvlite._core.request cimport *
cimport cython
from hvlite._core.pending cimport Pending, Rounds, Handle, Work, array_handle
from hvlite._core.kernels.cast cimport cast_arrays
from hvlite._core.submission cimport Submission
from hvlite._core.codes import DTYPES as _DTYPES, exception as _exception
from hvlite._core.dtypes import code_of as _code_of

cnp.import_array()

cdef enum:
    TYPES = 32          # NumPy's builtin type numbers (bool .. half) are below this


cdef class NameCycle:
    """One kind's automatic names, in turn (taken under the GIL: one order per rank)."""
    cdef list names
    cdef Py_ssize_t at

    cdef str take(self):
        cdef str name = self.names[self.at]
        self.at = self.at + 1 if self.at + 1 < len(self.names) else 0
        return name


cdef class AutoNames:
    """A set's automatic names, by kind: "<kind><mark><k>" for k = 0 .. count - 1, then round
    again. Every rank submits unnamed collectives in one order, so the k-th is the same call
    everywhere whatever its arguments (a rank whose k-th call differs meets the others' under
    one name and gets the mismatch), and the response cache holds a name in one variant per
    metadata it was agreed with, so a loop of any count of unnamed calls finds each call's
    (name, metadata) in the cache once lcm(count, names) calls have run. Counted here so that
    the lean face takes one without a Python call; the general path calls the object."""
    cdef dict cycles
    cdef readonly str mark
    cdef readonly int count

    def __init__(self, str mark, int count):
        self.cycles, self.mark, self.count = {}, mark, count

    cdef NameCycle cycle(self, str kind):
        cdef NameCycle c = self.cycles.get(kind)
        if c is None:       # setdefault: two threads' first calls share one cycle
            c = NameCycle.__new__(NameCycle)
            c.names = [f"{kind}{self.mark}{k}" for k in range(self.count)]
            c.at = 0
            c = self.cycles.setdefault(kind, c)
        return c

    def __call__(self, str kind):
        """The next automatic name of this kind."""
        return self.cycle(kind).take()


cdef bint _free_like(PyObject* p, cnp.ndarray a, cnp.dtype dtype=None):
    """Whether the pooled array `p` is held by the pool alone and shaped like `a`, typed like it
    (or as `dtype`, where given)."""
    cdef cnp.ndarray prev
    cdef int k
    if Py_REFCNT(<object>p) != 1 or type(<object>p) is not cnp.ndarray:
        return False
    prev = <cnp.ndarray>p
    if (cnp.PyArray_NDIM(prev) != cnp.PyArray_NDIM(a)
            or not cnp.PyArray_EquivTypes(<cnp.dtype>cnp.PyArray_DESCR(prev),
                                          <cnp.dtype>cnp.PyArray_DESCR(a) if dtype is None
                                          else dtype)):
        return False
    for k in range(cnp.PyArray_NDIM(a)):
        if cnp.PyArray_DIMS(prev)[k] != cnp.PyArray_DIMS(a)[k]:
            return False
    return True


cdef bint _f32(cnp.ndarray a, bint written):
    """A native C-contiguous float32 array (and writable, when written)."""
    cdef int flags = cnp.PyArray_FLAGS(a)
    return (cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32 and cnp.PyArray_ISNOTSWAPPED(a)
            and (flags & cnp.NPY_ARRAY_C_CONTIGUOUS) != 0
            and (not written or (flags & cnp.NPY_ARRAY_WRITEABLE) != 0))


@cython.final
cdef class CastHandle(Handle):
    """Lean.allreduce_cast_async's handle: the all-reduce of the cast `low`, whose result is
    cast back into `out` once it completes (with `low` None, of `out` itself reduced as 16-bit
    floats: nothing to cast); synchronize() returns `ret`."""
    cdef cnp.ndarray low, out
    cdef object ret

    def _collect(self):
        self._raise_failure()
        if self.low is not None:
            cast_arrays(self.low, self.out)
        return self.ret

    def _release(self):
        Handle._release(self)
        self.low = self.out = None
        self.ret = None

    def synchronize(self):
        """The protocol in one C call for a result that completed (as ArrayHandle's); an
        error goes the protocol's way."""
        cdef Pending p
        if not self._settled:
            p = self._pending       # held here while it waits (another thread may settle it)
            if p.settle_c() != ST_DONE:
                return Work.synchronize(self)
            if self.low is not None:
                cast_arrays(self.low, self.out)
            self._value, self._settled = self.ret, True
            self._pending = None
            self.low = self.out = None
            self.ret = None
        if self._error is not None:
            raise self._error
        return self._value


cdef class Lean:
    """One set's lean face (process_sets.SetState makes it; runtime.lean holds the global set's
    while a runtime runs). Its callables come from the layers above the core, which it does not
    import: the op type, the set's namer and output pool, the algorithm= check."""
    cdef Rounds coordinator       # the set's Coordinator (its post(): async calls)
    cdef object run_now           # and its Coordinator.run_now (synchronous calls)
    cdef object ops               # the reduction op type (hvlite.ops.ReduceOp)
    cdef object process_set       # the global set: other sets take the general path
    cdef NameCycle names          # the set's automatic all-reduce names
    cdef NameCycle bc_names, ag_names, rs_names, aa_names, barriers    # and the other kinds'
    cdef int rank, size           # this rank's in the set, and the set's size
    cdef object take              # (name, like, keep) -> an output array from the set's pool
    cdef object take_shaped       # (name, shape, dtype) -> one of a given shape from the pool
    cdef object kept              # the pool's last result of each name (its OrderedDict)
    cdef object keep_last         # its move_to_end: that name was used last
    cdef object older             # the result before each name's last (its OrderedDict)
    cdef Py_ssize_t pooled        # outputs of fewer bytes are not pooled: made here instead
    cdef Py_ssize_t gathered      # the same for allgather's and alltoall's (the pool's own rule)
    cdef object algorithm_code    # algorithm= value -> its code (raises for a bad one)
    cdef dict algorithms          # algorithm= value -> code, as found (the set's own table)
    cdef str mark                 # in every automatic name
    cdef Submission barrier_call  # every barrier's (an automatic name each time), made once
    cdef signed char codes[TYPES]  # NumPy type number -> dtype code; -1: ask code_of
    cdef dict lows                # name -> the fp16/bf16 cast its last allreduce_cast_async used
    cdef readonly bint round16    # fp16/bf16 compression reduces the float32 arrays themselves,
                                  # rounding as it goes (the set on one node: casts cost more
                                  # than the bytes they save there)

    def __init__(self, coordinator, ops, process_set, int rank, int size, AutoNames namer,
                 outputs, Py_ssize_t pooled, algorithm_code, dict algorithms, bint round16=False):
        cdef int t
        self.coordinator, self.run_now = coordinator, coordinator.run_now
        self.ops, self.process_set, self.pooled = ops, process_set, pooled
        self.rank, self.size = rank, size
        self.round16 = round16
        self.take, self.kept, self.keep_last = outputs.take, outputs.arrays, outputs.arrays.move_to_end
        self.older = outputs.older
        self.take_shaped, self.gathered = outputs.take_shaped, outputs.gathered_min
        self.names, self.mark = namer.cycle("allreduce"), namer.mark
        self.bc_names, self.ag_names = namer.cycle("broadcast"), namer.cycle("allgather")
        self.rs_names, self.aa_names = namer.cycle("reducescatter"), namer.cycle("alltoall")
        self.barriers = namer.cycle("barrier")
        self.barrier_call = self._submission(C_BARRIER, 0, 0, 0, self.barriers.names[0])
        self.algorithm_code, self.algorithms = algorithm_code, algorithms
        self.lows = {}
        for t in range(TYPES):
            self.codes[t] = -1
        for n in _DTYPES:
            try:
                d = np.dtype(n)
            except TypeError:       # bfloat16 without ml_dtypes
                continue
            if _code_of(d) >= 0 and d.isnative and d.num < TYPES:
                self.codes[d.num] = _code_of(d)

    cdef int _dtype(self, cnp.ndarray x) except -2:
        """x's dtype code, or -1 when the core cannot reduce it (the general path says so)."""
        cdef int t = cnp.PyArray_TYPE(x)
        if 0 <= t < TYPES and self.codes[t] >= 0 and cnp.PyArray_ISNOTSWAPPED(x):
            return self.codes[t]
        return _code_of(<object>cnp.PyArray_DESCR(x))        # ml_dtypes' bfloat16, say

    cdef int _algorithm(self, algorithm) except -2:
        """algorithm= (None: the set's default, HVLITE_ALLREDUCE_ALGORITHM) as its code, from
        the set's table; -1 for one the general path must refuse."""
        code = self.algorithms.get(algorithm)
        if code is None:
            try:
                code = self.algorithm_code(algorithm)
            except Exception:       # noqa: BLE001 - the general path says what is wrong
                return -1
            self.algorithms[algorithm] = code
        return code

    cdef object _prepare(self, x, op, name, algorithm, process_set, bint inplace):
        """(name, Submission, out) for a call this face takes, else None."""
        cdef cnp.ndarray a
        cdef int flags, dt, o, algo
        cdef bint auto = not name
        cdef Submission s
        if type(x) is not cnp.ndarray or process_set is not self.process_set:
            return None
        a = <cnp.ndarray>x
        flags = cnp.PyArray_FLAGS(a)
        if not (flags & cnp.NPY_ARRAY_C_CONTIGUOUS) or (inplace and not (flags & cnp.NPY_ARRAY_WRITEABLE)):
            return None
        if type(op) is not self.ops:
            return None
        o = PyLong_AsLong(op)
        if o < 0 or o >= OP_COUNT or o == OP_ADASUM:    # Adasum runs its own algorithm
            return None
        if name is not None and type(name) is not str:
            return None
        if algorithm is not None and type(algorithm) is not str:
            return None
        dt = self._dtype(a)
        if dt < 0:
            return None
        algo = self._algorithm(algorithm)
        if algo < 0:
            return None
        # The output before an automatic name: an allocation that fails here goes back to the
        # general path (which poisons the call on every rank) with no name taken on this rank
        # alone. Small outputs and automatic names' are not pooled: a new array, made here (the
        # pool's own rule, hvlite/outputs.py, without its call; so is the reuse in _kept).
        if inplace:
            out = x
        else:
            try:
                if cnp.PyArray_NBYTES(a) < self.pooled or auto or self.mark in name:
                    out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a), cnp.PyArray_TYPE(a), 0)
                else:
                    out = self._kept(name, a)
                    if out is None:
                        out = self.take(name, x, True)
            except MemoryError:
                return None
        if auto:
            name = self.names.take()
        s = self._submission(C_ALLREDUCE, dt, o, 0, name)     # an automatic name has the mark
        s.algorithm = algo
        return name, s, out

    cdef object _kept(self, str name, cnp.ndarray a):
        """The pool's last result of `name` when nothing but the pool holds it and it is shaped
        and typed like `a`, else the result before it on the same terms (the caller still
        holds the last one: `y = allreduce(x, name=n)` in a loop), which then becomes the last;
        else None (the pool's own rule, OutputPool._take, without its call)."""
        cdef PyObject* p = PyDict_GetItem(self.kept, name)
        cdef PyObject* q
        if p == NULL:
            return None
        if _free_like(p, a):
            self.keep_last(name)
            return <object>p
        q = PyDict_GetItem(self.older, name)
        if q == NULL or not _free_like(q, a):
            return None
        last, before = <object>p, <object>q
        self.kept[name] = before        # the generations trade places
        self.older[name] = last
        self.keep_last(name)
        return before

    cdef object _run(self, str name, Submission s, x, out):
        """Run a synchronous call to completion on this thread (as the general path's
        synchronous calls do): None once it completed with its result where the caller put it,
        else the completed Pending of a result the coordinator allocated; raises what failed."""
        s.inline = True
        p = self.run_now(name, s, x, out)
        if p is None:       # completed in its first round, on this thread
            return None
        if type(p) is tuple:
            raise _exception(*p)
        cdef Pending q = <Pending>p
        if q.pending():
            q.wait()
        if q.req.status != ST_DONE:
            raise _exception(q.req.error_kind, q.req.error.decode("utf-8", "replace"),
                             q.req.error_code)
        q.keep = None       # completed: the buffers are the caller's again
        return q if q.req.result != NULL else None

    def allreduce(self, x, op, name, algorithm, process_set, bint inplace):
        """The synchronous all-reduce: its output, run to completion on this thread (as the
        general path's synchronous calls do); None: the general path takes it."""
        got = self._prepare(x, op, name, algorithm, process_set, inplace)
        if got is None:
            return None
        name, s, out = got
        self._run(name, s, x, out)
        return out

    def allreduce_cast_async(self, x, out, op, name, wire, ret, account):
        """The fp16/bf16 compression's call from a gradient hook, in one C call: a named
        C-contiguous float32 array x, Sum or Average, reduced as `wire` (float16 or bfloat16)
        into `out` (x itself, or a float32 array of as many elements): x is cast,
        account(name, x's bytes, the cast's, "allreduce", the set's size) counts it, the cast
        is submitted, and the handle casts the result back into out when it completes and
        returns `ret` (out, or the tensor it views). None: the caller takes its general way.
        The same steps in Python cost ~15 us a tensor over the casts (docs/benchmarks.md)."""
        cdef cnp.ndarray a, dst, low
        cdef int o, dt, algo
        if (type(x) is not cnp.ndarray or type(out) is not cnp.ndarray or type(op) is not self.ops
                or type(name) is not str or not name or self.mark in name):
            return None
        a, dst = <cnp.ndarray>x, <cnp.ndarray>out
        if not (_f32(a, False) and _f32(dst, True) and cnp.PyArray_SIZE(a) == cnp.PyArray_SIZE(dst)):
            return None
        o = PyLong_AsLong(op)
        if o != OP_SUM and o != OP_AVERAGE:
            return None
        algo = self._algorithm(None)    # the general way's: ranks on either way must agree
        if algo < 0:
            return None
        if self.round16:
            return self._round16_async(a, dst, o, algo, name, wire, ret, account)
        low = self._low(name, a, wire)
        if low is None:
            return None
        dt = self._dtype(low)
        if dt < 0:
            return None
        cast_arrays(a, low)
        account(name, cnp.PyArray_NBYTES(a), cnp.PyArray_NBYTES(low), "allreduce", self.size)
        return self._cast_post(name, self._submission(C_ALLREDUCE, dt, o, 0, name), algo, low,
                               low, low, dst, ret)

    cdef object _round16_async(self, cnp.ndarray a, cnp.ndarray dst, int o, int algo, str name,
                               cnp.dtype wire, ret, account):
        """allreduce_cast_async on one node: a itself reduced into dst as float16/bfloat16
        values (codes.h's "float32 as float16"), the casts' way's arithmetic without its
        passes. The payload counted is the 16-bit one, as across nodes (the node's memory moves
        float32's)."""
        account(name, cnp.PyArray_NBYTES(a), cnp.PyArray_NBYTES(a) // 2, "allreduce", self.size)
        return self._cast_post(name, self._submission(
            C_ALLREDUCE, DT_F32_AS_F16 if wire.type_num == cnp.NPY_FLOAT16 else DT_F32_AS_BF16,
            o, 0, name), algo, a, dst, None, dst, ret)

    cdef CastHandle _cast_post(self, str name, Submission s, int algo, cnp.ndarray inp,
                               cnp.ndarray out, low, cnp.ndarray dst, ret):
        """Post the compressed all-reduce of inp into out under `algo`; its handle casts `low`
        back into dst (nothing to cast with low None) and returns ret."""
        cdef CastHandle h
        s.algorithm = algo
        p = self.coordinator.post(name, s, inp, out)
        if type(p) is tuple:
            raise _exception(*p)
        h = CastHandle.__new__(CastHandle)
        h._pending, h._finish, h.name, h._where = <Pending>p, None, name, ""
        h.low, h.out, h.ret = low, dst, ret
        return h

    cdef object _low(self, str name, cnp.ndarray a, cnp.dtype wire):
        """The cast's array for `name`: the one its last call used when nothing else holds it
        any more and it is shaped like a, else a new one, kept for the next call (None: it
        cannot be made). A new 128 KiB array each call is a fresh mapping each call, whose
        page faults cost 60 us of a 256x256 weight's 70 with a step's calls in flight."""
        cdef PyObject* p = PyDict_GetItem(self.lows, name)
        if p != NULL and _free_like(p, a, wire):
            return <object>p
        try:
            low = np.empty((<object>a).shape, wire)
        except MemoryError:
            return None
        self.lows[name] = low
        return low

    def allreduce_async(self, x, op, name, algorithm, process_set, bint inplace):
        """The asynchronous all-reduce: its handle; None: the general path takes it."""
        got = self._prepare(x, op, name, algorithm, process_set, inplace)
        if got is None:
            return None
        name, s, out = got
        p = self.coordinator.post(name, s, x, out)
        if type(p) is tuple:
            raise _exception(*p)
        return array_handle(<Pending>p, out, name)

    # ---- the other synchronous collectives, the same way --------------------------------------

    cdef int _plain(self, x, name, process_set, bint inplace) except -2:
        """x's dtype code when this face takes a call on it (a plain C-contiguous NumPy array
        of a dtype the core moves, writable if written in place, on the global set, a str name
        or none), else -1."""
        cdef int flags
        if (type(x) is not cnp.ndarray or process_set is not self.process_set
                or (name is not None and type(name) is not str)):
            return -1
        flags = cnp.PyArray_FLAGS(<cnp.ndarray>x)
        if not (flags & cnp.NPY_ARRAY_C_CONTIGUOUS) or (inplace and not (flags & cnp.NPY_ARRAY_WRITEABLE)):
            return -1
        return self._dtype(<cnp.ndarray>x)

    cdef Submission _submission(self, int collective, int dtype, int op, int root, str name):
        """Which call and how (an automatic name, or one with the mark, comes round again)."""
        cdef Submission s = Submission.__new__(Submission)
        s.collective, s.dtype, s.op, s.root = collective, dtype, op, root
        s.reused = self.mark in name
        return s

    cdef object _rows_out(self, cnp.ndarray x, object rows, name, bint gathered):
        """An output of `rows` rows like x's: a new one, but for a gathered result from the
        pool's size for those (OutputPool.gathered_min) the name's pooled array, or None for an
        automatic name (the core allocates the result: a ragged gather's would not fit an
        output sized for even rows). Raises MemoryError, ValueError or OverflowError for one
        that cannot be made (the callers leave the call to the general path: no name taken)."""
        cdef cnp.npy_intp dims[64]
        cdef int k, nd = cnp.PyArray_NDIM(x)
        nbytes = rows * cnp.PyArray_ITEMSIZE(x)     # Python integers: no wrap
        dims[0] = rows                              # OverflowError past npy_intp
        for k in range(1, nd):
            dims[k] = cnp.PyArray_DIMS(x)[k]
            nbytes *= dims[k]
        if gathered and nbytes >= self.gathered:
            if not name or self.mark in name:
                return None
            out = self.take_shaped(name, tuple([dims[k] for k in range(nd)]), (<object>x).dtype)
            if out is not None:
                return out
        return cnp.PyArray_EMPTY(nd, dims, cnp.PyArray_TYPE(x), 0)

    cdef object _gather(self, int collective, NameCycle names, cnp.ndarray a, object rows, name,
                        int dt):
        """allgather / alltoall, whose result is `rows` rows like a's when every rank sends as
        many as this one: `out` when the core wrote it there, else the rows it allocated (every
        rank's count summed: result_total); None: the general path takes it."""
        try:
            out = self._rows_out(a, rows, name, True)
        except (MemoryError, ValueError, OverflowError):
            return None
        if not name:
            name = names.take()
        p = self._run(name, self._submission(collective, dt, 0, 0, name), a, out)
        if p is None:
            return out
        return np.ndarray(((<Pending>p).result_total,) + (<object>a).shape[1:], (<object>a).dtype,
                          (<Pending>p).take_result())

    def broadcast(self, x, root_rank, name, process_set, bint inplace):
        """broadcast / broadcast_ of root_rank's array; None: the general path takes it."""
        cdef int dt = self._plain(x, name, process_set, inplace)
        cdef cnp.ndarray a
        if dt < 0 or type(root_rank) is not int or not 0 <= root_rank < self.size:
            return None
        a = <cnp.ndarray>x
        if inplace:
            out = x
        else:
            try:
                out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a), cnp.PyArray_TYPE(a), 0)
            except MemoryError:
                return None
        if not name:
            name = self.bc_names.take()
        self._run(name, self._submission(C_BROADCAST, dt, 0, root_rank, name), x, out)
        return out

    def allgather(self, x, name, process_set):
        """allgather of an array of at least one dimension; None: the general path takes it."""
        cdef int dt = self._plain(x, name, process_set, False)
        cdef cnp.ndarray a
        if dt < 0 or cnp.PyArray_NDIM(<cnp.ndarray>x) == 0:
            return None
        a = <cnp.ndarray>x
        return self._gather(C_ALLGATHER, self.ag_names, a, <object>cnp.PyArray_DIMS(a)[0] * self.size,
                            name, dt)

    def alltoall(self, x, splits, name, process_set):
        """alltoall in equal parts (no splits) of an array whose first dimension the set's
        size divides; None: the general path takes it (and names what is wrong)."""
        cdef int dt = self._plain(x, name, process_set, False)
        cdef cnp.ndarray a
        if dt < 0 or splits is not None or cnp.PyArray_NDIM(<cnp.ndarray>x) == 0:
            return None
        a = <cnp.ndarray>x
        if cnp.PyArray_DIMS(a)[0] % self.size:
            return None
        return self._gather(C_ALLTOALL, self.aa_names, a, <object>cnp.PyArray_DIMS(a)[0], name, dt)

    def reducescatter(self, x, op, name, process_set):
        """reducescatter with a plain op of an array of at least one dimension: this rank's
        block of rows (the first rows % size ranks get one more); None: the general path."""
        cdef int dt = self._plain(x, name, process_set, False)
        cdef int o
        cdef Py_ssize_t rows
        cdef cnp.ndarray a
        # only hvlite's own ops are looked up: anything else (unhashable, say) is the general
        # path's to name on every rank
        if dt < 0 or type(op) is not self.ops or cnp.PyArray_NDIM(<cnp.ndarray>x) == 0:
            return None
        o = PyLong_AsLong(op)
        if o < 0 or o >= OP_COUNT or o == OP_ADASUM:
            return None
        a = <cnp.ndarray>x
        rows = cnp.PyArray_DIMS(a)[0]
        try:
            out = self._rows_out(a, rows // self.size + (1 if self.rank < rows % self.size else 0), None,
                                False)
        except (MemoryError, ValueError, OverflowError):
            return None
        if not name:
            name = self.rs_names.take()
        self._run(name, self._submission(C_REDUCESCATTER, dt, o, 0, name), x, out)
        return out

    def barrier(self, process_set):
        """barrier() on the global set: True once every rank has called it; None: the
        general path takes it."""
        if process_set is not self.process_set:
            return None
        name = self.barriers.take()
        self._run(name, self.barrier_call, None, None)
        return True
