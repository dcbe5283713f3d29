"""The host submission path: argument checks and requests for NumPy arrays.

Every collective is submitted to its process set's background coordinator and returns a Handle.
An argument that fails its check on one rank still goes to the coordinator as a poisoned
request, so every other rank's handle for that name fails too (naming this rank and its
problem) instead of waiting forever; this rank raises at once. The device path (hvlite.gpu)
and the public front door (hvlite.collectives) sit on top of this module.
"""
import numpy as np

from hvlite import runtime
from hvlite.process_sets import global_process_set, state_of
from hvlite.config import ALGORITHMS
from hvlite._core import codes as _codes
from hvlite._core.codes import COLLECTIVES
from hvlite._core.dtypes import code_of, supported_names
from hvlite._core.cost_model import ALGORITHMS as CODES
from hvlite.errors import DtypeError, InvalidArgumentError
from hvlite.work import Work
from hvlite.ops import Average, as_op

_exception, _DONE = _codes.exception, _codes.DONE

# Collective codes: the table in _core/codes.h.
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, JOIN = range(len(COLLECTIVES))
_KIND = dict(enumerate(COLLECTIVES))


class Handle(Work):
    """An in-flight collective. `poll()` says whether it finished; `synchronize()` waits and
    returns its result (or raises what went wrong, on every rank involved). The runtime holds
    the buffers it reads and writes until it completes, so dropping a handle is safe."""

    __slots__ = ("_pending", "_finish", "name", "_where")

    def __init__(self, pending, finish, name, where=""):
        super().__init__()
        self._pending, self._finish, self.name = pending, finish, name
        self._where = where        # a process set's rank map, for messages that name ranks

    def _ready(self):
        return self._pending.poll()

    def _block(self):
        self._pending.wait()

    def _collect(self):
        p = self._pending
        if p.status != _DONE:
            raise _exception(p.error_kind, p.error + self._where, p.error_code)
        return self._finish(p)

    def _release(self):
        self._pending.release()
        self._pending = self._finish = None


def _algorithm_code(algorithm, rt):
    name = rt.settings.allreduce_algorithm if algorithm is None else algorithm
    code = CODES.get(name)
    if code is None or name not in ALGORITHMS:
        raise InvalidArgumentError(
            f"unknown all-reduce algorithm {name!r}; use one of {', '.join(ALGORITHMS)}")
    if name == "shm" and not rt.shm_info["available"]:     # agreed at init: all ranks raise
        raise InvalidArgumentError(f"all-reduce algorithm 'shm' is unavailable: {rt.shm_info['why']}")
    return code


def _dtype_code(x, name, kind):
    code = code_of(x.dtype)
    if code < 0:
        raise DtypeError(f"{kind} {name!r}: unsupported dtype {x.dtype}; hvlite handles "
                         f"{', '.join(supported_names())}")
    return code


def submit(st, kind, name, x, out=None, code=0, op=0, root=0, algo=0, splits=None,
           finish=None, check=None):
    """Queue one request on the set `st`. `check()` runs the argument checks and returns the
    codes it found; if it raises, a poisoned request goes out under the same name and this rank
    re-raises."""
    name = name or st.auto_name(_KIND[kind])
    shape = x.shape if x is not None else ()
    try:
        if check is not None:
            found = check(name)
            code, op, algo = found[:3]
            if len(found) > 3:
                splits = found[3]
    except (DtypeError, InvalidArgumentError) as e:
        c = code_of(x.dtype) if x is not None else 0
        p = st.coordinator.submit(name, kind, c, 0, root, 0, shape, None, None, None,
                                  f"{type(e).__name__}: {e}")
        if isinstance(p, tuple):
            raise _exception(*p) from None
        raise
    p = st.coordinator.submit(name, kind, code, op, root, algo, shape, x, out, splits, None)
    if isinstance(p, tuple):
        raise _exception(*p)
    where = f" (process set {st.id}: ranks are positions in {st.ranks})" if st.id else ""
    return Handle(p, finish, name, where)


def _contiguous(x):
    x = np.asarray(x)
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)

def _allreduce_check(rt, x, op, algorithm, inplace):
    def check(name):
        o = int(as_op(op))
        algo = _algorithm_code(algorithm, rt)
        code = _dtype_code(x, name, "allreduce")
        if inplace and not x.flags.writeable:
            raise InvalidArgumentError(f"allreduce_ {name!r}: the array is read-only; use "
                                       "hvlite.allreduce() for an out-of-place result")
        return code, o, algo
    return check


def allreduce_async(x, op=Average, name=None, algorithm=None, process_set=global_process_set):
    """Start reducing the host array `x` across the set's ranks into a new array."""
    rt = runtime.current()
    st = state_of(rt, process_set, "allreduce")
    x = _contiguous(x)
    out = np.empty_like(x)
    return submit(st, ALLREDUCE, name, x, out, finish=lambda p: out,
                  check=_allreduce_check(rt, x, op, algorithm, False))


def allreduce_async_(x, op=Average, name=None, algorithm=None, process_set=global_process_set):
    """Start reducing the NumPy array `x` in place; returns a Handle."""
    rt = runtime.current()
    st = state_of(rt, process_set, "allreduce_")
    if not isinstance(x, np.ndarray):
        raise InvalidArgumentError(
            f"allreduce_: in-place reduction needs a NumPy array, got {type(x).__name__}")
    if x.flags.c_contiguous:
        return submit(st, ALLREDUCE, name, x, x, finish=lambda p: x,
                       check=_allreduce_check(rt, x, op, algorithm, True))
    work = np.ascontiguousarray(x)

    def finish(p):
        x[...] = work
        return x
    return submit(st, ALLREDUCE, name, work, work, finish=finish,
                  check=_allreduce_check(rt, x, op, algorithm, True))


def allgather_async(x, name=None, process_set=global_process_set):
    """Start concatenating every rank's `x` along the first dimension (which may differ by
    rank), in rank order (within a process set: in the order of its ranks)."""
    st = state_of(runtime.current(), process_set, "allgather")
    x = _contiguous(x)
    if x.ndim == 0:
        x = x.reshape(1)
    dtype, tail = x.dtype, x.shape[1:]

    def finish(p):
        return np.frombuffer(p.take_result(), dtype=dtype).reshape((-1,) + tail)
    return submit(st, ALLGATHER, name, x, finish=finish,
                  check=lambda n: (_dtype_code(x, n, "allgather"), 0, 0))


def _root(st, root_rank):
    """The root's position in the set (0 for a bad root: the check reports it)."""
    ok = isinstance(root_rank, (int, np.integer)) and not isinstance(root_rank, bool)
    return max(st.position(int(root_rank)), 0) if ok else 0


def _root_check(st, x, root_rank, kind, inplace=False):
    def check(name):
        code = _dtype_code(x, name, kind)
        ok = isinstance(root_rank, (int, np.integer)) and not isinstance(root_rank, bool)
        if not ok or st.position(int(root_rank)) < 0:
            where = (f"of this job (0..{st.size - 1})" if st.id == 0 else
                     f"in process set {st.id} (ranks {st.ranks})")
            raise InvalidArgumentError(f"{kind} {name!r}: root_rank {root_rank!r} is not a rank "
                                       f"{where}")
        if inplace and not x.flags.writeable:
            raise InvalidArgumentError(f"{kind} {name!r}: the array is read-only")
        return code, 0, 0
    return check


def broadcast_async(x, root_rank, name=None, process_set=global_process_set):
    """Start copying root_rank's `x` to every rank of the set, into a new array. root_rank is
    a global rank (as in Horovod), and must belong to the set."""
    st = state_of(runtime.current(), process_set, "broadcast")
    x = _contiguous(x)
    out = np.empty_like(x)
    return submit(st, BROADCAST, name, x, out, root=_root(st, root_rank), finish=lambda p: out,
                  check=_root_check(st, x, root_rank, "broadcast"))


def broadcast_async_(x, root_rank, name=None, process_set=global_process_set):
    """Start overwriting the NumPy array `x` with root_rank's, in place."""
    st = state_of(runtime.current(), process_set, "broadcast_")
    if not isinstance(x, np.ndarray) or not x.flags.c_contiguous:
        raise InvalidArgumentError("broadcast_: needs a C-contiguous NumPy array")
    return submit(st, BROADCAST, name, x, x, root=_root(st, root_rank), finish=lambda p: x,
                  check=_root_check(st, x, root_rank, "broadcast_", inplace=True))


def alltoall_async(x, splits=None, name=None, process_set=global_process_set):
    """Start sending splits[i] rows of `x` (along the first dimension) to rank i (within a
    process set: to its i-th rank); without splits, equal parts. The result is the received
    rows, in rank order; with splits given, the handle's result is (rows, received_splits)."""
    st = state_of(runtime.current(), process_set, "alltoall")
    x = _contiguous(x)
    if x.ndim == 0:
        x = x.reshape(1)
    n = st.size
    dtype, tail = x.dtype, x.shape[1:]
    given = splits is not None

    def check(name):
        sp = None
        code = _dtype_code(x, name, "alltoall")
        if given:
            s = np.asarray(splits, dtype=np.int64).ravel()
            if s.size != n or (s < 0).any() or s.sum() != x.shape[0]:
                raise InvalidArgumentError(
                    f"alltoall {name!r}: splits {list(map(int, s))} must hold {n} non-negative "
                    f"row counts summing to the first dimension {x.shape[0]}")
            sp = [int(v) for v in s]
        elif x.shape[0] % n:
            raise InvalidArgumentError(f"alltoall {name!r}: first dimension {x.shape[0]} does "
                                       f"not split evenly over {n} ranks; pass splits=")
        return code, 0, 0, sp

    def finish(p):
        rows = np.frombuffer(p.take_result(), dtype=dtype).reshape((-1,) + tail)
        return (rows, np.asarray(p.result_splits, dtype=np.int64)) if given else rows
    return submit(st, ALLTOALL, name, x, check=check, finish=finish)


def reducescatter_async(x, op=Average, name=None, process_set=global_process_set):
    """Start reducing `x` across the set's ranks and keeping this rank's block of rows (the first
    dimension split into size blocks, the first `rows % size` one row longer)."""
    st = state_of(runtime.current(), process_set, "reducescatter")
    x = _contiguous(x)
    if x.ndim == 0:
        x = x.reshape(1)
    n, r = st.size, st.rank
    rows = x.shape[0] // n + (1 if r < x.shape[0] % n else 0)
    out = np.empty((rows,) + x.shape[1:], dtype=x.dtype)

    def check(name):
        return _dtype_code(x, name, "reducescatter"), int(as_op(op)), 0
    return submit(st, REDUCESCATTER, name, x, out, check=check, finish=lambda p: out)


def barrier_async(process_set=global_process_set):
    st = state_of(runtime.current(), process_set, "barrier")
    return submit(st, BARRIER, None, None, finish=lambda p: None)


def join_async():
    """join() as a handle; this rank's own outstanding collectives are waited for first."""
    rt = runtime.current()
    st = rt.global_state          # join is global, as in Horovod
    st.coordinator.wait_all()     # a joined rank holds no collectives of its own, dropped or not
    return submit(st, JOIN, st.auto_name("join"), None, finish=lambda p: int(p.value))

