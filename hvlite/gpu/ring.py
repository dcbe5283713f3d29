"""All-reduce for a CUDA-aware MPI: buffers stay on the device, reductions run there.

A ring (reduce-scatter, then all-gather) in which MPI moves device memory directly and the
reduction of each received segment is one elementwise call of the array module `xp` (CuPy on a
GPU; NumPy in the CPU tests, which run this same code over MPI). Segments travel as bytes, so
every dtype goes through MPI the same way. Integer Average truncates toward zero, as the core
does, so device and host results agree bitwise.
"""
import numpy as np

from hvlite.ops import ReduceOp


_UINT = {2: "uint16", 4: "uint32", 8: "uint64"}
_DEFAULT_NAN = {"float16": 0x7E00, "float32": 0x7FC00000, "float64": 0x7FF8000000000000}


def _minmax(xp, op):
    """Min/Max with the core's rule (_core/minmax.h), so device and host agree bitwise: NaN
    propagates as the default quiet NaN, -0 is below +0 whatever the operands' order."""
    base = xp.minimum if op == ReduceOp.Min else xp.maximum

    def reduce(a, b, out):
        if a.dtype.name not in _DEFAULT_NAN:
            return base(a, b, out=out)
        uint = getattr(xp, _UINT[a.dtype.itemsize])
        ai, bi = a.view(uint), b.view(uint)
        bits = base(a, b).view(uint)
        bits = xp.where(a == b, (ai | bi) if op == ReduceOp.Min else (ai & bi), bits)
        bits = xp.where(xp.isnan(a) | xp.isnan(b), uint(_DEFAULT_NAN[a.dtype.name]), bits)
        out[...] = bits.view(a.dtype)
        return out
    return reduce


def _reducer(xp, op):
    op = ReduceOp(op)
    if op == ReduceOp.Adasum:       # refused earlier, in gpu/submit.py
        raise ValueError("the device ring reduces elementwise; Adasum takes host arrays")
    if op in (ReduceOp.Min, ReduceOp.Max):
        return _minmax(xp, op)
    return {ReduceOp.Sum: xp.add, ReduceOp.Average: xp.add, ReduceOp.Product: xp.multiply}[op]


def bounds(count, n):
    """Segment i of the ring is [b[i], b[i+1]): sizes differ by at most one element."""
    q, r = divmod(count, n)
    b = [0]
    for i in range(n):
        b.append(b[-1] + q + (1 if i < r else 0))
    return b


def divide(xp, x, n):
    """x /= n in place, with the core's rounding (integers truncate toward zero)."""
    if n == 1:
        return
    if x.dtype.kind == "f":
        x[...] = x / x.dtype.type(n) if x.dtype.itemsize > 2 else (x.astype(np.float32) /
                                                                    np.float32(n)).astype(x.dtype)
    else:
        q = x // n
        q += ((x % n) != 0) & (x < 0)
        x[...] = q


def allreduce(comm, x, op, xp, tmp=None, fence=None):
    """Reduce the flat, contiguous device array `x` in place across `comm`. `fence()` runs
    after each reduction, before MPI reads its result (on a GPU: wait for the stream)."""
    from mpi4py import MPI
    n, r = comm.Get_size(), comm.Get_rank()
    count = x.size
    if n > 1 and count:
        reduce = _reducer(xp, op)
        b = bounds(count, n)
        if tmp is None:
            tmp = xp.empty(b[1] - b[0], dtype=x.dtype)
        right, left = (r + 1) % n, (r - 1) % n
        for step in range(n - 1):            # reduce-scatter: segment r+1 ends reduced on r
            s, t = (r - step) % n, (r - step - 1) % n
            recv = tmp[:b[t + 1] - b[t]]
            comm.Sendrecv([x[b[s]:b[s + 1]].view(xp.uint8), MPI.BYTE], right, 0,
                          [recv.view(xp.uint8), MPI.BYTE], left, 0)
            reduce(x[b[t]:b[t + 1]], recv, out=x[b[t]:b[t + 1]])
            if fence is not None:
                fence()
        for step in range(n - 1):            # all-gather the reduced segments
            s, t = (r + 1 - step) % n, (r - step) % n
            comm.Sendrecv([x[b[s]:b[s + 1]].view(xp.uint8), MPI.BYTE], right, 1,
                          [x[b[t]:b[t + 1]].view(xp.uint8), MPI.BYTE], left, 1)
    if ReduceOp(op) == ReduceOp.Average:
        divide(xp, x, n)
    return x
