"""Public collectives: argument checks, then the core.

Input checks that fail on some ranks only still take part in the collective metadata check,
so every rank raises (naming the offending rank) instead of the others hanging.
"""
import itertools

import numpy as np

from hvlite import runtime
from hvlite.config import ALGORITHMS
from hvlite.errors import DtypeError, InvalidArgumentError, MismatchError
from hvlite.ops import Average, ReduceOp, as_op

_auto_names = itertools.count()
_FIELDS = ("element count", "dtype", "op", "algorithm")


def _algorithm_code(algorithm, rt):
    from hvlite._core.select import ALGORITHMS as CODES
    name = rt.settings.allreduce_algorithm if algorithm is None else algorithm
    if name not in ALGORITHMS:
        raise InvalidArgumentError(
            f"unknown all-reduce algorithm {name!r}; use one of {', '.join(ALGORITHMS)}")
    return CODES[name]


def _describe(meta):
    from hvlite._core.select import NAMES as ALG
    count, dtype, op, algo = meta
    return (count, dtype, ReduceOp(op).name if 0 <= op < len(ReduceOp) else "invalid",
            ALG.get(algo, "invalid"))


def _raise_disagreement(rt, name, meta, local_error):
    """Collective: gather each rank's metadata and raise the same MismatchError everywhere."""
    everyone = rt.comm.allgather((_describe(meta), str(local_error) if local_error else None))
    lines = []
    for r, (_, err) in enumerate(everyone):
        if err:
            lines.append(f"rank {r}: {err}")
    for i, field in enumerate(_FIELDS):
        values = [d[i] for d, _ in everyone]
        if len(set(values)) > 1:
            lines.append(f"ranks disagree on {field}: " +
                         ", ".join(f"rank {r}: {v}" for r, v in enumerate(values)))
    raise MismatchError(f"allreduce {name!r} failed on every rank: " + "; ".join(lines))


def _prepare(x, name, op, algorithm, rt):
    """Check arguments. Returns (dtype code, op code, algorithm code, local error or None);
    a failed check gives code -1 instead of raising, so the collective check can fail everywhere."""
    from hvlite._core.dtypes import code_of, supported_names
    err = None
    try:
        opc = int(as_op(op))
    except InvalidArgumentError as e:
        opc, err = -1, InvalidArgumentError(f"allreduce {name!r}: {e}")
    try:
        algo = _algorithm_code(algorithm, rt)
    except InvalidArgumentError as e:
        algo, err = -1, err or InvalidArgumentError(f"allreduce {name!r}: {e}")
    code = code_of(x.dtype)
    if code < 0:
        err = err or DtypeError(f"allreduce {name!r}: unsupported dtype {x.dtype}; hvlite reduces "
                                f"{', '.join(supported_names())}")
    return code, opc, algo, err


def allreduce_(x, op=Average, name=None, algorithm=None):
    """Reduce `x` across all ranks in place and return it. `x` must be a writable NumPy array;
    a non-contiguous one is reduced through a contiguous copy."""
    rt = runtime.current()
    name = name or f"allreduce.noname.{next(_auto_names)}"
    if not isinstance(x, np.ndarray):
        raise InvalidArgumentError(
            f"allreduce_ {name!r}: in-place reduction needs a NumPy array, got {type(x).__name__}")
    code, op, algo, err = _prepare(x, name, op, algorithm, rt)
    if err is None and not x.flags.writeable:
        err = InvalidArgumentError(f"allreduce_ {name!r}: the array is read-only; use "
                                   "hvlite.allreduce() for an out-of-place result")
    work = x if x.flags.c_contiguous else np.ascontiguousarray(x)
    _reduce(rt, work, code, op, algo, name, err)
    if work is not x:
        x[...] = work
    return x


def allreduce(x, op=Average, name=None, algorithm=None):
    """Return a new array holding the reduction of `x` (anything array-like) across all ranks.

    op: hvlite.Sum, Average (default, as in Horovod), Min, Max or Product.
    algorithm: "ring", "rhd", "rd", "tree", "hierarchical", "mpi" or "auto" (default from
    HVLITE_ALLREDUCE_ALGORITHM).
    """
    rt = runtime.current()
    name = name or f"allreduce.noname.{next(_auto_names)}"
    x = np.asarray(x)
    code, op, algo, err = _prepare(x, name, op, algorithm, rt)
    out = np.array(x, order="C", copy=True) if err is None else x
    _reduce(rt, out, code, op, algo, name, err)
    return out


def _reduce(rt, arr, code, op, algo, name, err):
    meta = (arr.size, str(arr.dtype), op, algo)
    if err is not None:
        # Take part in the check so the other ranks fail too, then name the culprits.
        if rt.engine.agree(arr.size, code, op, algo, True) == 2:
            raise err
        _raise_disagreement(rt, name, meta, err)
    used = rt.engine.allreduce(arr, code, op, algo, rt.settings.check_agreement)
    if used < 0:
        _raise_disagreement(rt, name, meta, None)
    return used
