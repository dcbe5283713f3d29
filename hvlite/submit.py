"""The host submission path: argument checks and requests for NumPy arrays.

Every collective is submitted to its process set's background coordinator and returns a Handle.
An argument that fails its check on one rank still goes to the coordinator as a poisoned
request, so every other rank's handle for that name fails too (naming this rank and its
problem) instead of waiting forever; this rank raises at once. The device path (hvlite.gpu)
and the public front door (hvlite.collectives) sit on top of this module.
"""
import numpy as np

from hvlite import runtime
from hvlite.process_sets import AUTO_MARK, algorithm_code, global_process_set, state_of
from hvlite._core import codes as _codes
from hvlite._core.submission import Submission
from hvlite._core.codes import COLLECTIVES
from hvlite._core.dtypes import code_of, supported_names
from hvlite.errors import DtypeError, InvalidArgumentError, UnsupportedOperationError
from hvlite._core.pending import ArrayHandle, Handle  # noqa: F401  (the host path's handles)
from hvlite.ops import Adasum, Average, as_op

_exception, _DONE = _codes.exception, _codes.DONE

# Collective codes: the table in _core/codes.h.
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, JOIN = range(len(COLLECTIVES))
_KIND = dict(enumerate(COLLECTIVES))
# Adasum's dot products and coefficients are defined on real vectors (Horovod's too).
_ADASUM_DTYPES = frozenset(i for i, n in enumerate(_codes.DTYPES)
                           if n in ("float16", "bfloat16", "float32", "float64"))


def _dtype_code(x, name, kind):
    code = code_of(x.dtype)
    if code < 0:
        raise DtypeError(f"{kind} {name!r}: unsupported dtype {x.dtype}; hvlite handles "
                         f"{', '.join(supported_names())}")
    return code


def _name(st, kind, name):
    """(the name to submit under, this rank's complaint about it or None). No name: the set's
    automatic one. A name that is not a string is submitted as str(name), so the poisoned
    request meets the other ranks' under the name they most likely used, and the automatic
    counters stay in step."""
    if name is None or name == "":
        return st.auto_name(_KIND[kind]), None
    if isinstance(name, str):
        return name, None
    text = str(name)
    return text, InvalidArgumentError(f"{_KIND[kind]} {text!r}: the name must be a string, got "
                                      f"{type(name).__name__}")


def _own_error(e, kind, name):
    """hvlite's exception for whatever rejected this rank's arguments (a NumPy conversion, an
    int() of a bad value...), naming the collective."""
    if isinstance(e, (DtypeError, InvalidArgumentError, UnsupportedOperationError)):
        return e if repr(name) in str(e) else type(e)(f"{_KIND[kind]} {name!r}: {e}")
    return InvalidArgumentError(f"{_KIND[kind]} {name!r}: {type(e).__name__}: {e}")


def _poison(st, kind, name, error, x=None, root=0):
    """This rank rejected its arguments: send a poisoned request under `name`, so every other
    rank's handle for it fails with a MismatchError naming this rank and the problem, then raise
    `error` here."""
    try:        # the dtype and shape it would have had, so that only the problem is reported
        arr = None if x is None else np.asarray(x)
        if arr is not None and arr.dtype == object:
            arr = None
    except Exception:           # noqa: BLE001 - unconvertible: no dtype or shape to report
        arr = None
    c = code_of(arr.dtype) if arr is not None else 0
    shape = arr.shape if arr is not None else ()
    p = st.coordinator.submit(name, Submission(kind, c, root=root, shape=shape,
                                               error=f"{type(error).__name__}: {error}"), None, None)
    if isinstance(p, tuple):
        raise _exception(*p) from None
    del p       # the runtime holds it; the raised error's frame would (error -> frame -> error)
    raise error


class Request:
    """What one rank submits: built by a collective's `prepare(name)`, which converts and checks
    the arguments (any exception it raises poisons the request)."""
    __slots__ = ("x", "out", "code", "op", "root", "algo", "splits", "finish")

    def __init__(self, x, out=None, code=0, op=0, root=0, algo=0, splits=None, finish=None):
        self.x, self.out, self.code, self.op, self.root = x, out, code, op, root
        self.algo, self.splits, self.finish = algo, splits, finish


def submit_prepared(st, kind, name, prepare, raw=None, root=0, sync=False):
    """Queue one request on the set `st`; `prepare(name)` returns its Request. If the name or
    prepare() is rejected, a poisoned request goes out under the same name and this rank raises
    hvlite's error (`raw`: the argument as given, for the poisoned request's dtype and shape).
    `sync`: the caller wants the result now: its thread runs the rounds itself, and the result
    is returned (or the error raised) instead of a handle."""
    name, problem = _name(st, kind, name)
    reused = AUTO_MARK in name      # automatic names come round again (ProcessSetState.auto_name)
    try:
        if problem is not None:
            raise problem
        r = prepare(name)
    except Exception as e:      # noqa: BLE001 - whatever this rank rejects, every rank learns
        error = _own_error(e, kind, name)
        _poison(st, kind, name, error, raw, root)
    p = st.coordinator.submit(name, Submission(kind, r.code, r.op, r.root, r.algo, splits=r.splits,
                                               inline=sync, reused=reused), r.x, r.out)
    if isinstance(p, tuple):
        raise _exception(*p)
    if sync:            # no handle: the request has completed unless a stop took it over
        p.wait()
        if p.status != _DONE:
            raise _exception(p.error_kind, p.error + _where(st), p.error_code)
        result = r.finish(p)
        p.release()
        return result
    return Handle(p, r.finish, name, _where(st))


def _where(st):
    """A process set's rank map, for messages that name ranks."""
    return f" (process set {st.id}: ranks are positions in {st.ranks})" if st.id else ""


def submit(st, kind, name, x, out=None, code=0, op=0, root=0, algo=0, splits=None,
           finish=None, check=None, sync=False):
    """Queue one request on the set `st` for an array already converted. `check(name)` runs the
    argument checks and returns the codes it found; if it raises, a poisoned request goes out
    under the same name and this rank re-raises."""
    def prepare(name):
        r = Request(x, out, code, op, root, algo, splits, finish)
        if check is not None:
            found = check(name)
            r.code, r.op, r.algo = found[:3]
            if len(found) > 3:
                r.splits = found[3]
        return r
    return submit_prepared(st, kind, name, prepare, x, root, sync)


def _contiguous(x, ndim1=False):
    """`x` as a C-contiguous NumPy array (at least 1-D with ndim1); a conversion that NumPy
    refuses (a ragged list, an object it cannot read) raises here, inside prepare()."""
    x = np.asarray(x)
    if x.dtype == object:
        raise InvalidArgumentError(f"cannot use a {type(x).__name__} of Python objects as an "
                                   "array (a ragged list, or elements NumPy cannot convert)")
    if ndim1 and x.ndim == 0:
        x = x.reshape(1)
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def _rows(result, dtype, tail, rows):
    """The gathered rows, as an array of shape (rows,) + tail (works for zero-size rows, whose
    bytes alone cannot say how many rows there were); made in one step (frombuffer then reshape
    cost a small allgather 0.4 us more)."""
    return np.ndarray((rows,) + tail, dtype, result)


def _adasum_algorithm(x, code, algorithm, name):
    """Adasum's checks; it runs its own algorithm, so its requests say 'auto' on every rank
    whatever HVLITE_ALLREDUCE_ALGORITHM is."""
    if code not in _ADASUM_DTYPES:
        raise DtypeError(f"allreduce {name!r}: op=Adasum takes float16, bfloat16, float32 or "
                         f"float64 data, not dtype {x.dtype}")
    if algorithm not in (None, "auto"):
        raise InvalidArgumentError(
            f"allreduce {name!r}: op=Adasum runs its own algorithm (vector halving, distance "
            f"doubling); algorithm={algorithm!r} does not apply (leave it unset or 'auto')")
    return _codes.ALGORITHMS.code("auto")


def _allreduce_check(rt, x, op, algorithm, inplace, name):
    o = as_op(op)
    if o == Adasum:
        code = _dtype_code(x, name, "allreduce")
        algo = _adasum_algorithm(x, code, algorithm, name)
    else:
        algo = algorithm_code(algorithm, rt.settings.allreduce_algorithm, rt.shm_info)
        code = _dtype_code(x, name, "allreduce")
    o = int(o)
    if inplace and not x.flags.writeable:
        raise InvalidArgumentError(f"allreduce_ {name!r}: the array is read-only; use "
                                   "hvlite.allreduce() for an out-of-place result")
    return code, o, algo


def _block_rows(rows, size, rank):
    """Rows of reducescatter's result on `rank`: the first rows % size ranks get one more."""
    return rows // size + (1 if rank < rows % size else 0)


def allreduce_async(x, op=Average, name=None, algorithm=None, process_set=global_process_set, sync=False,
                    reduce_as=None):
    """Start reducing the host array `x` across the set's ranks into a new array. `reduce_as`:
    the core's code to reduce it as instead of its dtype's ("float32 as float16", for the
    fp16/bf16 compression on one node: float32 `x` only)."""
    rt = runtime.current()
    st = state_of(rt, process_set, "allreduce")

    def prepare(name):
        a = _contiguous(x)
        code, o, algo = _allreduce_check(rt, a, op, algorithm, False, name)
        code = code if reduce_as is None else reduce_as
        out = st.outputs.take(name, a, keep=AUTO_MARK not in name)
        return Request(a, out, code, o, 0, algo, finish=lambda p: out)
    return submit_prepared(st, ALLREDUCE, name, prepare, x, sync=sync)


def allreduce_async_(x, op=Average, name=None, algorithm=None, process_set=global_process_set, sync=False,
                     reduce_as=None):
    """Start reducing the NumPy array `x` in place; returns a Handle. `reduce_as`: as for
    allreduce_async."""
    rt = runtime.current()
    st = state_of(rt, process_set, "allreduce_")

    def prepare(name):
        if not isinstance(x, np.ndarray):
            raise InvalidArgumentError(f"allreduce_ {name!r}: in-place reduction needs a NumPy "
                                       f"array, got {type(x).__name__}")
        code, o, algo = _allreduce_check(rt, x, op, algorithm, True, name)
        code = code if reduce_as is None else reduce_as
        if x.flags.c_contiguous:
            return Request(x, x, code, o, 0, algo, finish=lambda p: x)
        work = np.ascontiguousarray(x)

        def finish(p):
            x[...] = work
            return x
        return Request(work, work, code, o, 0, algo, finish=finish)
    return submit_prepared(st, ALLREDUCE, name, prepare, x, sync=sync)


def allgather_async(x, name=None, process_set=global_process_set, sync=False):
    """Start concatenating every rank's `x` along the first dimension (which may differ by
    rank), in rank order (within a process set: in the order of its ranks)."""
    st = state_of(runtime.current(), process_set, "allgather")

    def prepare(name):
        a = _contiguous(x, ndim1=True)
        dtype, tail = a.dtype, a.shape[1:]

        def finish(p):
            return _rows(p.take_result(), dtype, tail, p.result_total)
        return Request(a, code=_dtype_code(a, name, "allgather"), finish=finish)
    return submit_prepared(st, ALLGATHER, name, prepare, x, sync=sync)


def _root_ok(st, root_rank):
    ok = isinstance(root_rank, (int, np.integer)) and not isinstance(root_rank, bool)
    return ok and st.position(int(root_rank)) >= 0


def _root(st, root_rank):
    """The root's position in the set (0 for a bad root: the check reports it)."""
    return st.position(int(root_rank)) if _root_ok(st, root_rank) else 0


def _root_check(st, x, root_rank, kind, name, inplace=False):
    code = _dtype_code(x, name, kind)
    if not _root_ok(st, root_rank):
        where = (f"of this job (0..{st.size - 1})" if st.id == 0 else
                 f"in process set {st.id} (ranks {st.ranks})")
        raise InvalidArgumentError(f"{kind} {name!r}: root_rank {root_rank!r} is not a rank "
                                   f"{where}")
    if inplace and not x.flags.writeable:
        raise InvalidArgumentError(f"{kind} {name!r}: the array is read-only")
    return code


def broadcast_async(x, root_rank, name=None, process_set=global_process_set, sync=False):
    """Start copying root_rank's `x` to every rank of the set, into a new array. root_rank is
    a global rank (as in Horovod), and must belong to the set."""
    st = state_of(runtime.current(), process_set, "broadcast")
    root = _root(st, root_rank)

    def prepare(name):
        a = _contiguous(x)
        out = np.empty_like(a)
        code = _root_check(st, a, root_rank, "broadcast", name)
        return Request(a, out, code, 0, root, finish=lambda p: out)
    return submit_prepared(st, BROADCAST, name, prepare, x, root, sync)


def broadcast_async_(x, root_rank, name=None, process_set=global_process_set, sync=False):
    """Start overwriting the NumPy array `x` with root_rank's, in place."""
    st = state_of(runtime.current(), process_set, "broadcast_")
    root = _root(st, root_rank)

    def prepare(name):
        if not isinstance(x, np.ndarray) or not x.flags.c_contiguous:
            raise InvalidArgumentError(f"broadcast_ {name!r}: needs a C-contiguous NumPy array, "
                                       f"got {type(x).__name__}")
        code = _root_check(st, x, root_rank, "broadcast_", name, inplace=True)
        return Request(x, x, code, 0, root, finish=lambda p: x)
    return submit_prepared(st, BROADCAST, name, prepare, x, root, sync)


def _splits(splits, n, rows, name):
    """Row counts per destination, checked: n non-negative integers summing to at most `rows`
    (Horovod's rule: the rows past their sum are not sent)."""
    try:
        s = np.asarray(splits)
        if s.dtype == bool or not np.issubdtype(s.dtype, np.integer):
            raise TypeError
        values = [int(v) for v in s.ravel()]     # Python ints: the sum below cannot wrap
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"alltoall {name!r}: splits {splits!r} must be {n} integer "
                                   "row counts") from None
    if len(values) != n or any(v < 0 for v in values) or sum(values) > rows:
        raise InvalidArgumentError(
            f"alltoall {name!r}: splits {values} must hold {n} non-negative "
            f"row counts summing to at most the first dimension {rows}")
    return values


def alltoall_async(x, splits=None, name=None, process_set=global_process_set, sync=False):
    """Start sending splits[i] rows of `x` (along the first dimension) to rank i (within a
    process set: to its i-th rank); without splits, equal parts. The result is the received
    rows, in rank order; with splits given, the handle's result is (rows, received_splits)."""
    st = state_of(runtime.current(), process_set, "alltoall")
    n = st.size
    given = splits is not None

    def prepare(name):
        a = _contiguous(x, ndim1=True)
        dtype, tail = a.dtype, a.shape[1:]
        code = _dtype_code(a, name, "alltoall")
        sp = None
        if given:
            sp = _splits(splits, n, a.shape[0], name)
        elif a.shape[0] % n:
            raise InvalidArgumentError(f"alltoall {name!r}: first dimension {a.shape[0]} does "
                                       f"not split evenly over {n} ranks; pass splits=")

        def finish(p):
            got = np.asarray(p.result_splits, dtype=np.int64)
            rows = _rows(p.take_result(), dtype, tail, int(got.sum()))
            return (rows, got) if given else rows
        return Request(a, None, code, splits=sp, finish=finish)
    return submit_prepared(st, ALLTOALL, name, prepare, x, sync=sync)


def reducescatter_async(x, op=Average, name=None, process_set=global_process_set, sync=False):
    """Start reducing `x` across the set's ranks and keeping this rank's block of rows (the first
    dimension split into size blocks, the first `rows % size` one row longer)."""
    st = state_of(runtime.current(), process_set, "reducescatter")
    n, r = st.size, st.rank

    def prepare(name):
        a = _contiguous(x)
        if a.ndim == 0:     # no rows to scatter: Horovod refuses it too (every rank is told)
            raise InvalidArgumentError(f"reducescatter {name!r}: a 0-d array has no rows to "
                                       "scatter (reshape it to one dimension)")
        out = np.empty((_block_rows(a.shape[0], n, r),) + a.shape[1:], dtype=a.dtype)
        code = _dtype_code(a, name, "reducescatter")
        o = as_op(op)
        if o == Adasum:
            raise UnsupportedOperationError(f"reducescatter {name!r}: op=Adasum applies to allreduce "
                                            "and grouped_allreduce only (its dot products need "
                                            "whole tensors)")
        return Request(a, out, code, int(o), finish=lambda p: out)
    return submit_prepared(st, REDUCESCATTER, name, prepare, x, sync=sync)


def barrier_async(process_set=global_process_set, sync=False):
    st = state_of(runtime.current(), process_set, "barrier")
    return submit(st, BARRIER, None, None, finish=lambda p: None, sync=sync)


def join_async():
    """join() as a handle; this rank's own outstanding collectives are waited for first."""
    rt = runtime.current()
    st = rt.global_state          # join is global, as in Horovod
    st.coordinator.wait_all()     # a joined rank holds no collectives of its own, dropped or not
    return submit(st, JOIN, st.auto_name("join"), None, finish=lambda p: int(p.value))

