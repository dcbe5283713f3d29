"""Rank side: every algorithm x dtype x op x size against NumPy, at whatever N mpiexec gave.

Inputs are exact in every dtype, so results must match the reference bit for bit (which also
proves every rank holds identical bits); a second pass with random floats checks closeness to
float64 and identity across ranks when the reduction order matters.
HVLITE_TEST_ALGORITHMS restricts the algorithms (the pretend-node runs test hierarchical and shm).
"""
import os

import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
from helpers import (DTYPES, OPS, assert_everywhere, assert_identical_everywhere, is_float,
                     rank_input, reference, same_bits)

hvd.init()
N, RANK = hvd.size(), hvd.rank()
ALGORITHMS = os.environ.get("HVLITE_TEST_ALGORITHMS", "ring,rhd,rd,tree,hierarchical,shm,mpi,auto").split(",")
SMALL = sorted({0, 1, max(N - 1, 0), N + 1, 97})


def large_sizes(dtype):
    """1 MiB + 3 elements, and several MiB (4 MiB of data + 1 element: straddles segments)."""
    return [(1 << 20) // dtype.itemsize + 3, (4 << 20) // dtype.itemsize + 1]


def check_case(count, dtype, op, algorithms, failures):
    inputs = [rank_input(r, count, dtype, op) for r in range(N)]
    want = reference(inputs, dtype, op, N)
    for algo in algorithms:
        x = inputs[RANK].copy()
        got = hvd.allreduce(x, op=op, algorithm=algo)
        if not same_bits(got, want):
            bad = np.flatnonzero(got.view(np.uint8).reshape(count, -1).any(axis=1) !=
                                 want.view(np.uint8).reshape(count, -1).any(axis=1)) if count else []
            failures.append(f"{algo} {dtype} {op.name} count={count}: got {got[:6]} want "
                            f"{want[:6]} (first differing index {bad[:1]})")
        if not same_bits(x, inputs[RANK]):
            failures.append(f"{algo} {dtype} {op.name} count={count}: out-of-place call changed its input")
        y = inputs[RANK].copy()
        hvd.allreduce_(y, op=op, algorithm=algo)
        if not same_bits(y, want):
            failures.append(f"{algo} {dtype} {op.name} count={count}: in-place result differs")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_small_sizes_every_op(dtype):
    failures = []
    for count in SMALL:
        for op in OPS:
            check_case(count, dtype, op, ALGORITHMS, failures)
    assert_everywhere(failures)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_sizes_sum(dtype):
    failures = []
    for count in large_sizes(dtype):
        check_case(count, dtype, hvd.Sum, ALGORITHMS, failures)
    assert_everywhere(failures)


@pytest.mark.parametrize("op", [hvd.Average, hvd.Min, hvd.Max, hvd.Product], ids=lambda o: o.name)
def test_large_sizes_float32_every_op(op):
    failures = []
    for count in large_sizes(np.dtype(np.float32)):
        check_case(count, np.dtype(np.float32), op, ALGORITHMS, failures)
    assert_everywhere(failures)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if is_float(d)], ids=str)
@pytest.mark.parametrize("algo", ALGORITHMS)
def test_random_floats_identical_on_every_rank(dtype, algo):
    """Order-dependent inputs: close to the float64 sum, and the same bits on every rank."""
    count = 100_003
    rng = np.random.default_rng([7, RANK])
    x = rng.standard_normal(count).astype(dtype)
    got = hvd.allreduce(x, op=hvd.Sum, algorithm=algo)
    everyone = MPI.COMM_WORLD.allgather(x)
    exact = np.sum([e.astype(np.float64) for e in everyone], axis=0)
    eps = float(np.finfo(np.float16).eps if dtype == np.float16 else
                2.0 ** -7 if not np.issubdtype(dtype, np.floating) else np.finfo(dtype).eps)
    tol = 4 * eps * N * np.sum([np.abs(e.astype(np.float64)) for e in everyone], axis=0) + 1e-300
    err = np.abs(got.astype(np.float64) - exact)
    failures = [] if np.all(err <= tol) else [f"max error {err.max()} above tolerance"]
    assert_everywhere(failures)
    assert_identical_everywhere(got, f"{algo} {dtype}")


def test_shapes_and_non_contiguous():
    """Shape and dtype are kept; a strided view is reduced in place through a copy."""
    base = np.arange(40, dtype=np.float64).reshape(8, 5) * (RANK + 1)
    got = hvd.allreduce(base[:, 1:4], op=hvd.Sum)
    tri = N * (N + 1) // 2
    failures = []
    if got.shape != (8, 3) or not np.array_equal(got, np.arange(40.0).reshape(8, 5)[:, 1:4] * tri):
        failures.append(f"strided out-of-place: {got}")
    view = base[::2]
    hvd.allreduce_(view, op=hvd.Sum)
    if not np.array_equal(base[::2], np.arange(40.0).reshape(8, 5)[::2] * tri) or \
            not np.array_equal(base[1::2], np.arange(40.0).reshape(8, 5)[1::2] * (RANK + 1)):
        failures.append("strided in-place touched the wrong rows")
    scalar = hvd.allreduce(np.float32(RANK), op=hvd.Max)
    if scalar.shape != () or scalar != N - 1:
        failures.append(f"0-d: {scalar!r}")
    listy = hvd.allreduce([1, 2, 3], op=hvd.Sum)
    if listy.tolist() != [N, 2 * N, 3 * N]:
        failures.append(f"list input: {listy}")
    assert_everywhere(failures)


def test_average_is_default_op():
    got = hvd.allreduce(np.full(3, float(RANK)))
    assert_everywhere([] if np.allclose(got, (N - 1) / 2) else [f"default op gave {got}"])


def test_many_calls_reuse_scratch():
    """Hundreds of calls of varied sizes on one runtime: nothing leaks between calls."""
    failures = []
    for i in range(200):
        count = (i * 7919) % 3001
        x = np.full(count, RANK + i, dtype=np.int64)
        got = hvd.allreduce(x, op=hvd.Sum, algorithm=ALGORITHMS[i % len(ALGORITHMS)])
        want = N * i + N * (N - 1) // 2
        if count and not np.all(got == want):
            failures.append(f"call {i}: {got[:3]} != {want}")
    assert_everywhere(failures)


@pytest.mark.parametrize("op", [hvd.Min, hvd.Max], ids=lambda o: o.name)
def test_signed_zeros_identical_on_every_rank(op):
    """+0 and -0 compare equal, so Min/Max must combine in one fixed order to agree bitwise."""
    rng = np.random.default_rng([11, RANK])
    x = np.where(rng.random(4099) < 0.5, -0.0, 0.0).astype(np.float32)
    failures = []
    for algo in ALGORITHMS:
        got = hvd.allreduce(x, op=op, algorithm=algo)
        if np.any(got != 0):
            failures.append(f"{algo}: nonzero result")
        assert_identical_everywhere(got, f"{algo} {op.name} of signed zeros")
    assert_everywhere(failures)
