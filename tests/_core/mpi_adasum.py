"""Rank side: op=Adasum against the NumPy reference of the recursive formula (tests/helpers.py,
the same pairing as the core), at whatever N mpiexec gave: every float dtype, sizes from 0 to
more than a segment, fused batches whose tensors each need their own dot products, zero vectors,
a joined rank, and the refusals. Every result must also be bitwise identical on every rank."""
import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
from hvlite._core.algorithms import adasum as core_adasum
from helpers import (BF16, adasum_close, adasum_reference, assert_everywhere,
                     assert_identical_everywhere, expect_raise_everywhere, same_bits)

hvd.init()
N, RANK = hvd.size(), hvd.rank()
LEVELS = max(N - 1, 0).bit_length() + 1          # fold + tree levels, an upper bound
FLOATS = [np.dtype(d) for d in ("float16", "float32", "float64")] + ([BF16] if BF16 else [])


def vector(rank, count, dtype, seed=0):
    """A shared direction plus this rank's own part, so the dot products matter (neither
    parallel nor orthogonal); the same on every rank for every rank."""
    common = np.random.default_rng([seed, count, 1]).standard_normal(count)
    own = np.random.default_rng([seed, count, 2, rank]).standard_normal(count)
    return ((0.5 + 0.25 * rank) * common + own).astype(dtype)


def sizes(dtype):
    # 0, 1, odd, and more than HVLITE_SEGMENT_BYTES (256 KiB) of data
    return [0, 1, 7, max(N, 2) * 3 + 1, 97, (256 << 10) // dtype.itemsize + 3]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_matches_the_reference_every_size(dtype):
    failures = []
    for count in sizes(dtype):
        inputs = [vector(r, count, dtype) for r in range(N)]
        want = adasum_reference(inputs)
        x = inputs[RANK].copy()
        got = hvd.allreduce(x, op=hvd.Adasum, name=f"adasum.{dtype}.{count}")
        if not adasum_close(got, want, LEVELS):
            failures.append(f"{dtype} count={count}: got {got[:4]} want {want[:4]}")
        if not same_bits(x, inputs[RANK]):
            failures.append(f"{dtype} count={count}: the out-of-place call changed its input")
        y = inputs[RANK].copy()
        hvd.allreduce_(y, op=hvd.Adasum)
        if not same_bits(y, got):
            failures.append(f"{dtype} count={count}: in place differs from out of place")
        if N == 1 and not same_bits(got, inputs[0]):
            failures.append(f"{dtype} count={count}: one rank must give its input back")
        assert_identical_everywhere(got, f"{dtype} count={count}")
    assert_everywhere(failures)


def _batch(dtype):
    """Tensors whose right answers differ in kind: the same vector on every rank (Adasum gives
    it back exactly), vectors on disjoint supports (their exact sum), general ones, and sizes
    0, 1 and odd. A batch that shared dot products across tensors gets the first two wrong."""
    count = 4 * N + 3
    same = np.random.default_rng(7).standard_normal(count).astype(dtype)
    disjoint = np.zeros((N, count), dtype)
    for r in range(N):
        disjoint[r, r::N] = np.arange(1, len(range(r, count, N)) + 1) * (r + 1)
    tensors = [[same.copy() for _ in range(N)], list(disjoint),
               [vector(r, 33, dtype, seed=3) for r in range(N)],
               [np.zeros(0, dtype) for _ in range(N)],
               [vector(r, 1, dtype, seed=4) * 100 for r in range(N)],
               [vector(r, 2001, dtype, seed=5).reshape(3, 667) for r in range(N)]]
    exact = {0: same, 1: disjoint.sum(axis=0, dtype=np.float64).astype(dtype)}
    return tensors, exact


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_a_fused_step_reduces_each_tensor_with_its_own_dot_products(dtype):
    tensors, exact = _batch(dtype)
    failures = []
    handles = [hvd.allreduce_async(t[RANK], op=hvd.Adasum, name=f"fused.{dtype}.{k}")
               for k, t in enumerate(tensors)]
    for k, (t, h) in enumerate(zip(tensors, handles)):
        got = h.synchronize()
        want = adasum_reference(t)
        if not adasum_close(got, want, LEVELS):
            failures.append(f"tensor {k} {dtype}: got {got.ravel()[:4]} want {want.ravel()[:4]}")
        if k in exact and not same_bits(got, exact[k]):
            failures.append(f"tensor {k} {dtype}: got {got.ravel()[:6]}, exactly "
                            f"{exact[k].ravel()[:6]} expected")
        assert_identical_everywhere(got, f"fused tensor {k} {dtype}")
    grouped = hvd.grouped_allreduce([t[RANK] for t in tensors], op=hvd.Adasum)
    for k, (t, got) in enumerate(zip(tensors, grouped)):
        if not adasum_close(got, adasum_reference(t), LEVELS):
            failures.append(f"grouped tensor {k} {dtype}")
    assert_everywhere(failures)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_the_core_with_explicit_tensor_boundaries(dtype):
    """The algorithm itself on one buffer holding the batch's tensors end to end."""
    tensors, exact = _batch(dtype)
    counts = [t[RANK].size for t in tensors]
    buf = np.concatenate([t[RANK].ravel() for t in tensors])
    comm = MPI.COMM_WORLD.Dup()
    try:
        core_adasum.allreduce_fused(comm, buf, counts)
    finally:
        comm.Free()
    failures, start = [], 0
    for k, (t, n) in enumerate(zip(tensors, counts)):
        got = buf[start:start + n].reshape(t[0].shape)
        start += n
        if not adasum_close(got, adasum_reference(t), LEVELS):
            failures.append(f"tensor {k} {dtype}: got {got.ravel()[:4]}")
        if k in exact and not same_bits(got, exact[k]):
            failures.append(f"tensor {k} {dtype}: not exact")
    assert_identical_everywhere(buf, f"core batch {dtype}")
    assert_everywhere(failures)


def test_zero_vectors_contribute_nothing():
    failures = []
    zeros = hvd.allreduce(np.zeros(9, np.float32), op=hvd.Adasum, name="zeros.all")
    if not same_bits(zeros, np.zeros(9, np.float32)):
        failures.append(f"all zero: {zeros}")
    last = vector(N - 1, 9, np.float64)
    mine = last if RANK == N - 1 else np.zeros(9)
    got = hvd.allreduce(mine, op=hvd.Adasum, name="zeros.but.last")
    if not same_bits(got, last):
        failures.append(f"one non-zero vector: {got} instead of {last}")
    inputs = [np.zeros(11) if r == 0 else vector(r, 11, np.float64) for r in range(N)]
    got = hvd.allreduce(inputs[RANK], op=hvd.Adasum, name="zeros.first")
    if not adasum_close(got, adasum_reference(inputs), LEVELS):
        failures.append(f"rank 0 zero: {got}")
    assert_identical_everywhere(got, "rank 0 zero")
    assert_everywhere(failures)


def test_a_joined_rank_contributes_a_zero_vector():
    if N < 2:
        pytest.skip("needs two ranks")
    inputs = [vector(r, 21, np.float32) for r in range(N)]
    inputs[N - 1] = np.zeros(21, np.float32)
    failures = []
    if RANK != N - 1:
        got = hvd.allreduce(vector(RANK, 21, np.float32), op=hvd.Adasum, name="joined")
        if not adasum_close(got, adasum_reference(inputs), LEVELS):
            failures.append(f"got {got[:4]}")
    hvd.join()
    assert_everywhere(failures)


def test_refusals_name_the_problem_on_every_rank():
    expect_raise_everywhere(lambda: hvd.allreduce(np.ones(4, np.int32), op=hvd.Adasum),
                            hvd.DtypeError, "Adasum", "int32")
    expect_raise_everywhere(lambda: hvd.allreduce(np.ones(4), op="adasum", algorithm="ring"),
                            hvd.InvalidArgumentError, "Adasum", "ring")
    expect_raise_everywhere(lambda: hvd.reducescatter(np.ones((N, 2)), op=hvd.Adasum),
                            hvd.UnsupportedOperationError, "Adasum", "allreduce")
    expect_raise_everywhere(lambda: hvd.reducescatter(np.ones((N, 2)), op=hvd.Adasum),
                            NotImplementedError)        # Horovod's type, a RuntimeError
    # the set still works afterwards
    got = hvd.allreduce(np.ones(3), op=hvd.Adasum, name="after.refusals")
    assert_everywhere([] if same_bits(got, np.ones(3)) else [f"after the refusals: {got}"])
