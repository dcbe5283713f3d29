"""The lean face of the commonest call: an all-reduce of a plain NumPy array on the global set,
checked and submitted in one C call.

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
from hvlite._core.codes cimport *
from hvlite._core.request cimport *
from hvlite._core.pending cimport Pending
from hvlite._core.submission cimport Submission
from hvlite._core.codes import DTYPES as _DTYPES, exception as _exception
from hvlite._core.dtypes import code_of as _code_of

cnp.import_array()

cdef enum:
    TYPES = 32          # NumPy's builtin type numbers (bool .. half) are below this


cdef class Lean:
    """One set's lean face (process_sets.SetState makes it; runtime.lean holds the global set's
    while a runtime runs). Its callables come from the layers above the core, which it does not
    import: the op type, the set's namer and output pool, the algorithm= check, the handle."""
    cdef object submit            # the set's Coordinator.submit
    cdef object ops               # the reduction op type (hvlite.ops.ReduceOp)
    cdef object process_set       # the global set: other sets take the general path
    cdef object namer             # kind -> the set's next automatic name
    cdef object take              # (name, like, keep) -> an output array from the set's pool
    cdef object algorithm_code    # algorithm= value -> its code (raises for a bad one)
    cdef dict algorithms          # algorithm= value -> code, as found (the set's own table)
    cdef object handle            # (pending, out, name) -> the caller's handle
    cdef str mark                 # in every automatic name
    cdef signed char codes[TYPES]  # NumPy type number -> dtype code; -1: ask code_of

    def __init__(self, coordinator, ops, process_set, namer, take, algorithm_code,
                 dict algorithms, handle, str mark):
        cdef int t
        self.submit = coordinator.submit
        self.ops, self.process_set, self.namer, self.take = ops, process_set, namer, take
        self.algorithm_code, self.algorithms, self.handle, self.mark = (
            algorithm_code, algorithms, handle, mark)
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

    cdef object _prepare(self, x, op, name, algorithm, process_set, bint inplace):
        """(name, Submission, out) for a call this face takes, else None."""
        cdef cnp.ndarray a
        cdef int flags, dt, o, algo
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
        if o < OP_SUM or o > OP_PRODUCT:        # Adasum runs its own algorithm
            return None
        if name is not None and type(name) is not str:
            return None
        if algorithm is not None and type(algorithm) is not str:
            return None
        dt = self._dtype(a)
        if dt < 0:
            return None
        code = self.algorithms.get(algorithm)
        if code is None:
            try:
                code = self.algorithm_code(algorithm)
            except Exception:       # noqa: BLE001 - the general path says what is wrong
                return None
            self.algorithms[algorithm] = code
        algo = code
        # The output before an automatic name: an allocation that fails here goes back to the
        # general path (which poisons the call on every rank) with no name taken on this rank
        # alone. Automatic names are not pooled (take's keep=False: a new array).
        if inplace:
            out = x
        else:
            try:
                out = self.take(name, x, bool(name) and self.mark not in name)
            except MemoryError:
                return None
        if not name:
            name = self.namer("allreduce")
        s = Submission.__new__(Submission)
        s.collective, s.dtype, s.op, s.algorithm = C_ALLREDUCE, dt, o, algo
        s.reused = self.mark in name
        return name, s, out

    def allreduce(self, x, op, name, algorithm, process_set, bint inplace):
        """The synchronous all-reduce: its output, run to completion on this thread (as the
        general path's synchronous calls do); None: the general path takes it."""
        got = self._prepare(x, op, name, algorithm, process_set, inplace)
        if got is None:
            return None
        name, s, out = got
        (<Submission>s).inline = True
        p = self.submit(name, s, x, out)
        if type(p) is tuple:
            raise _exception(*p)
        cdef Pending q = <Pending>p
        if q.pending():
            q.wait()
        if q.req.status != ST_DONE:
            raise _exception(q.req.error_kind, q.req.error.decode("utf-8", "replace"),
                             q.req.error_code)
        q.keep = None       # completed: the buffers are the caller's again
        return out

    def allreduce_async(self, x, op, name, algorithm, process_set, bint inplace):
        """The asynchronous all-reduce: its handle; None: the general path takes it."""
        got = self._prepare(x, op, name, algorithm, process_set, inplace)
        if got is None:
            return None
        name, s, out = got
        p = self.submit(name, s, x, out)
        if type(p) is tuple:
            raise _exception(*p)
        return self.handle(p, out, name)
