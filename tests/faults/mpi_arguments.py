"""Rank side: whatever one rank rejects in its arguments reaches every rank. The last rank passes
the bad argument and raises hvlite's own error (never a raw AttributeError, ValueError or
TypeError from NumPy); the others, which passed good arguments under the same name, fail with a
MismatchError naming that rank and its problem. Afterwards the runtime still works."""
import pickle
import threading

import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
from helpers import assert_everywhere, expect_raise_everywhere

hvd.init()
RANK, N = hvd.rank(), hvd.size()
LAST = N - 1
CULPRIT = RANK == LAST


def _still_works():
    got = hvd.allreduce(np.ones(4), op=hvd.Sum, name="still-works")
    assert_everywhere([] if np.array_equal(got, np.full(4, float(N))) else [f"after: {got}"])


def _one_rank_rejects(bad, good, own_error, *fragments):
    """bad() on the last rank, good() elsewhere: the last raises own_error, the others a
    MismatchError naming the last rank; every message holds each fragment."""
    if CULPRIT:
        expect_raise_everywhere(bad, own_error, *fragments)
    else:
        expect_raise_everywhere(good, hvd.MismatchError, f"rank {LAST}", *fragments)
    _still_works()


CASES = {
    "int-name": (lambda: hvd.allreduce(np.ones(3), name=123),
                 lambda: hvd.allreduce(np.ones(3), name="123"),
                 hvd.InvalidArgumentError, "'123'", "must be a string"),
    "ragged-list": (lambda: hvd.allreduce([[1.0, 2.0], [3.0]], name="ragged"),
                    lambda: hvd.allreduce(np.ones((2, 2)), name="ragged"),
                    hvd.InvalidArgumentError, "'ragged'"),
    "splits-not-integers": (lambda: hvd.alltoall(np.ones(N), splits=["a"] * N, name="sp"),
                            lambda: hvd.alltoall(np.ones(N), splits=[1] * N, name="sp"),
                            hvd.InvalidArgumentError, "'sp'", "splits"),
    "splits-wrong-count": (lambda: hvd.alltoall(np.ones(N), splits=[N], name="sp2"),
                           lambda: hvd.alltoall(np.ones(N), splits=[1] * N, name="sp2"),
                           hvd.InvalidArgumentError, "'sp2'", "splits"),
    "inplace-on-list": (lambda: hvd.allreduce_([1.0, 2.0], name="inplace"),
                        lambda: hvd.allreduce_(np.ones(2), name="inplace"),
                        hvd.InvalidArgumentError, "'inplace'", "NumPy"),
    "broadcast-inplace-on-list": (lambda: hvd.broadcast_([1.0], 0, name="b_"),
                                  lambda: hvd.broadcast_(np.ones(1), 0, name="b_"),
                                  hvd.InvalidArgumentError, "'b_'", "NumPy"),
    "bad-op-reducescatter": (lambda: hvd.reducescatter(np.ones(N), op="median", name="rs"),
                             lambda: hvd.reducescatter(np.ones(N), op=hvd.Sum, name="rs"),
                             hvd.InvalidArgumentError, "median"),
    # an op that cannot be hashed (a list) must not break a lean path's table lookup on the
    # culprit alone: the general path names it on every rank
    "unhashable-op-reducescatter": (lambda: hvd.reducescatter(np.ones(N), op=["sum"], name="rsu"),
                                    lambda: hvd.reducescatter(np.ones(N), op=hvd.Sum, name="rsu"),
                                    hvd.InvalidArgumentError, "'rsu'"),
    "unhashable-op-allreduce": (lambda: hvd.allreduce(np.ones(4), op=["sum"], name="aru"),
                                lambda: hvd.allreduce(np.ones(4), op=hvd.Sum, name="aru"),
                                hvd.InvalidArgumentError, "'aru'"),
    "unhashable-op-allreduce_": (lambda: hvd.allreduce_(np.ones(4), op={}, name="aru_"),
                                 lambda: hvd.allreduce_(np.ones(4), op=hvd.Sum, name="aru_"),
                                 hvd.InvalidArgumentError, "'aru_'"),
    "reducescatter-0d": (lambda: hvd.reducescatter(np.float64(2.0) * np.ones(()), name="rs0"),
                         lambda: hvd.reducescatter(np.ones(N), name="rs0"),
                         hvd.InvalidArgumentError, "'rs0'", "0-d"),
    "bad-root": (lambda: hvd.broadcast(np.ones(2), root_rank="zero", name="root"),
                 lambda: hvd.broadcast(np.ones(2), root_rank=0, name="root"),
                 hvd.InvalidArgumentError, "'zero'"),
    "object-array": (lambda: hvd.allgather(np.array([object()] * 2), name="objs"),
                     lambda: hvd.allgather(np.ones(2), name="objs"),
                     hvd.InvalidArgumentError, "'objs'"),
    "grouped-given-an-array": (lambda: hvd.grouped_allreduce(np.ones(3), name="glist"),
                               lambda: hvd.grouped_allreduce([np.ones(3)], name="glist"),
                               hvd.InvalidArgumentError, "'glist", "list of arrays"),
    "unsupported-dtype-allgather": (lambda: hvd.allgather(np.ones(2, np.complex64), name="c"),
                                    lambda: hvd.allgather(np.ones(2, np.float32), name="c"),
                                    hvd.DtypeError, "complex64"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_rank_rejects(case):
    if N == 1:
        pytest.skip("needs another rank to learn of it")
    bad, good, own, *fragments = CASES[case]
    _one_rank_rejects(bad, good, own, *fragments)


def test_every_rank_rejects_an_int_name_without_hanging():
    expect_raise_everywhere(lambda: hvd.allgather(np.ones(2), name=7), hvd.InvalidArgumentError,
                            "'7'", "must be a string")
    _still_works()


def test_grouped_call_with_one_bad_part():
    """Every part goes out, the bad one poisoned: no rank waits for the parts after it."""
    parts = [np.ones(2), np.ones(3), np.ones(4)]
    mine = [parts[0], [[1.0], [2.0, 3.0]], parts[2]] if CULPRIT else parts
    if CULPRIT:
        expect_raise_everywhere(lambda: hvd.grouped_allreduce(mine, name="grp"),
                                hvd.InvalidArgumentError, "'grp.1'")
    else:
        expect_raise_everywhere(lambda: hvd.grouped_allreduce(mine, name="grp"),
                                hvd.MismatchError, "'grp.1'", f"rank {LAST}")
    _still_works()


def test_unpicklable_object_on_the_root():
    root = LAST
    obj = threading.Lock() if RANK == root else None    # (cloudpickle takes a lambda)
    if RANK == root:
        expect_raise_everywhere(lambda: hvd.broadcast_object(obj, root, name="obj"),
                                hvd.InvalidArgumentError, "pickle")
    else:
        expect_raise_everywhere(lambda: hvd.broadcast_object(obj, root, name="obj"),
                                hvd.MismatchError, f"rank {root}", "pickle")
    _still_works()
    assert pickle  # the module the root failed in


def test_synchronize_and_poll_of_none():
    for fn in (hvd.synchronize, hvd.poll):
        expect_raise_everywhere(lambda: fn(None), hvd.InvalidArgumentError, "handle")
        expect_raise_everywhere(lambda: fn(None), ValueError)


def test_init_again_with_other_arguments_is_refused():
    rt = hvd._current()
    hvd.init()
    hvd.init(comm=MPI.COMM_WORLD)
    assert hvd._current() is rt
    other = MPI.COMM_WORLD.Dup()
    try:
        expect_raise_everywhere(lambda: hvd.init(comm=other), hvd.InvalidArgumentError,
                                "another communicator")
    finally:
        other.Free()
    expect_raise_everywhere(lambda: hvd.init(process_sets=[hvd.ProcessSet([0])]),
                            hvd.InvalidArgumentError, "already initialized")
    assert hvd._current() is rt
    _still_works()
