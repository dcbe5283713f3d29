"""Rank side: Min/Max of floats with NaN, infinities and signed zeros on every algorithm.

Ranks hold -0/+0 and NaN/inf in different positions; the result must be the documented rule's
(tests/minmax_rule.py: NumPy's answer, -0 below +0, NaN as the default quiet NaN) and, above all,
the same bits on every rank, MPI's own reduction ("mpi") and MPI_Reduce_scatter included.
HVLITE_TEST_ALGORITHMS restricts the algorithms.
"""
import os

import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
import minmax_rule
from helpers import BF16, assert_everywhere

hvd.init()
N, RANK = hvd.size(), hvd.rank()
ALGORITHMS = os.environ.get("HVLITE_TEST_ALGORITHMS", "ring,rhd,rd,tree,hierarchical,shm,mpi,auto").split(",")
FLOATS = [d for d in (BF16, np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)) if d is not None]
OPS = {hvd.Min: minmax_rule.MIN, hvd.Max: minmax_rule.MAX}
SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 2.5, -2.5], np.float64)


def rank_input(rank, count, dtype):
    """Every combination of -0/+0 across the ranks in the first 2**N positions (rank r holds -0
    where bit r of the position is set), then NaN on one rank against inf on the others, then
    random specials (NaNs of either sign, some with another payload)."""
    uint = minmax_rule.UINT[dtype.itemsize]
    pos = np.arange(count)
    x = np.where((pos >> rank) & 1, -0.0, 0.0)
    rest = pos >= (1 << N)
    x[rest] = np.where((pos[rest] % N) == rank, np.nan, np.where(pos[rest] % 2, np.inf, -np.inf))
    tail = pos >= (1 << N) + 4 * N
    rng = np.random.default_rng([5, rank, count])
    x[tail] = rng.choice(SPECIALS, int(tail.sum()))
    x = x.astype(dtype)
    bits = x.view(uint)
    odd = tail & (rng.random(count) < 0.05)
    bits[odd] = minmax_rule.default_nan(dtype).view(uint) | uint(3)
    return x


def sizes():
    return [(1 << N) + 4 * N, 1029, 70_001]


def gathered_bits_agree(arr):
    return len(set(MPI.COMM_WORLD.allgather(np.ascontiguousarray(arr).tobytes()))) == 1


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", list(OPS), ids=lambda o: o.name)
def test_allreduce_nan_and_signed_zeros(dtype, op):
    failures = []
    for count in sizes():
        inputs = [rank_input(r, count, dtype) for r in range(N)]
        want = minmax_rule.reduce(inputs, OPS[op])
        for algo in ALGORITHMS:
            got = hvd.allreduce(inputs[RANK].copy(), op=op, algorithm=algo)
            if not gathered_bits_agree(got):
                failures.append(f"{algo} {dtype} {op.name} count={count}: ranks hold different bits")
            if got.tobytes() != want.tobytes():
                uint = minmax_rule.UINT[dtype.itemsize]
                diff = np.flatnonzero(got.view(uint) != want.view(uint))
                failures.append(f"{algo} {dtype} {op.name} count={count}: {len(diff)} elements "
                                f"differ from the rule, first at {diff[:3]}: got {got[diff[:3]]} "
                                f"want {want[diff[:3]]}")
    assert_everywhere(failures)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", list(OPS), ids=lambda o: o.name)
def test_reducescatter_nan_and_signed_zeros(dtype, op):
    """MPI_Reduce_scatter runs the same user-defined ops: each block is the rule's, bit for bit."""
    rows = 2 * N + 1
    inputs = [rank_input(r, rows * 37, dtype).reshape(rows, 37) for r in range(N)]
    want = minmax_rule.reduce(inputs, OPS[op])
    start = sum(rows // N + (1 if r < rows % N else 0) for r in range(RANK))
    mine = want[start:start + rows // N + (1 if RANK < rows % N else 0)]
    got = hvd.reducescatter(inputs[RANK].copy(), op=op)
    failures = [] if got.tobytes() == mine.tobytes() else [f"{dtype} {op.name}: block differs"]
    assert_everywhere(failures)
