"""Rank side: topology, thread level, and running on a communicator the user passes in."""
import os

import hvlite as hvd

hvd.init()  # before mpi4py.MPI is imported, so HVLITE_MPI_THREAD_LEVEL decides the level

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from helpers import assert_everywhere  # noqa: E402

WORLD = MPI.COMM_WORLD
RANK, N = WORLD.Get_rank(), WORLD.Get_size()


def test_topology():
    """Against where the ranks really are: the node of a rank is its host (MPI's processor
    name), local ranks in rank order within a host, cross ranks among the ranks of one local
    rank in rank order; HVLITE_LOCAL_SIZE=k cuts the ranks into nodes of k instead."""
    hvd.init()
    k = int(os.environ.get("HVLITE_LOCAL_SIZE", "0"))
    assert (hvd.rank(), hvd.size()) == (RANK, N)
    node_of = [r // k for r in range(N)] if k else WORLD.allgather(MPI.Get_processor_name())
    local = [r for r in range(N) if node_of[r] == node_of[RANK]]
    local_ranks = [[q for q in range(N) if node_of[q] == node_of[r]].index(r) for r in range(N)]
    cross = [r for r in range(N) if local_ranks[r] == local_ranks[RANK]]
    assert (hvd.local_rank(), hvd.local_size()) == (local.index(RANK), len(local))
    assert (hvd.cross_rank(), hvd.cross_size()) == (cross.index(RANK), len(cross))
    if k:   # nodes of k in rank order: the cross rank is the node's index
        assert hvd.cross_rank() == RANK // k


def test_thread_level_reported():
    hvd.init()
    want = os.environ.get("HVLITE_MPI_THREAD_LEVEL", "multiple")
    level = MPI.Query_thread()
    names = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
             MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}
    assert names[level] == want
    assert hvd.mpi_thread_level() == f"MPI_THREAD_{want.upper()}"
    assert hvd.mpi_threads_supported() == (want == "multiple")


def test_user_communicator():
    """init(comm) on half of the ranks: sums stay within each half."""
    hvd.shutdown()
    half = WORLD.Split(RANK % 2, RANK)
    hvd.init(comm=half)
    try:
        assert hvd.size() == half.Get_size() and hvd.rank() == half.Get_rank()
        got = hvd.allreduce(np.full(7, RANK, np.int32), op=hvd.Sum, algorithm="ring")
        want = sum(r for r in range(N) if r % 2 == RANK % 2)
        assert_everywhere([] if np.all(got == want) else [f"half sum {got} != {want}"])
    finally:
        hvd.shutdown()
        half.Free()


def test_rank_list_communicator():
    """init(comm=[ranks]) as in Horovod: each half calls it with its own list, in reverse order;
    the list's order is the ranks' order, sums stay within the half, init() with the same list
    again is the running state and with another list an error. Lists that are not a set of
    world ranks holding the caller are refused on the caller alone, before any collective."""
    hvd.shutdown()
    mine = [r for r in range(N) if r % 2 == RANK % 2][::-1]
    failures = []
    hvd.init(comm=mine)
    try:
        if (hvd.size(), hvd.rank()) != (len(mine), mine.index(RANK)):
            failures.append(f"size {hvd.size()}, rank {hvd.rank()} on {mine}")
        if hvd.allgather_object(RANK) != mine:
            failures.append(f"order {hvd.allgather_object(RANK)} != {mine}")
        got = hvd.allreduce(np.full(5, RANK + 1, np.int64), op=hvd.Sum)
        if not np.all(got == sum(r + 1 for r in mine)):
            failures.append(f"half sum {got}")
        hvd.init(comm=list(mine))             # the same list: idempotent
        for other in ([], sorted(mine)):
            if other == mine:
                continue
            try:
                hvd.init(comm=other)
                failures.append(f"init(comm={other}) on a runtime of {mine} went through")
            except hvd.InvalidArgumentError:
                pass
    finally:
        hvd.shutdown()
    others = [r for r in range(N) if r != RANK]
    for bad, says in (([RANK, RANK], "more than once"), ([RANK, N], "not ranks of"),
                      ([RANK, -1], "not ranks of"), ([str(RANK)], "must be integers"),
                      ([RANK, True], "must be integers"), (others or [N], "not")):
        try:
            hvd.init(comm=bad)
            hvd.shutdown()
            failures.append(f"init(comm={bad}) went through")
        except hvd.InvalidArgumentError as e:
            if says not in str(e) or hvd.is_initialized():
                failures.append(f"init(comm={bad}): {e}")
    hvd.init(comm=[])                         # COMM_WORLD, as Horovod's default
    try:
        if hvd.size() != N:
            failures.append(f"init(comm=[]) has size {hvd.size()}")
    finally:
        hvd.shutdown()
    assert_everywhere(failures)


def test_dynamic_sets_asked_for_in_any_case():
    """init(process_sets="DYNAMIC"): Horovod compares the word in lower case."""
    hvd.shutdown()
    hvd.init(process_sets="DYNAMIC")
    try:
        assert hvd._current().dynamic_sets
        if N > 1 and MPI.Query_thread() == MPI.THREAD_MULTIPLE:
            ps = hvd.add_process_set([0])
            assert hvd.remove_process_set(ps) is True
            assert hvd.remove_process_set(ps) is False        # (no longer registered)
    finally:
        hvd.shutdown()
    hvd.init()


def test_object_handle_across_shutdown_and_reinit():
    """An object collective pending at shutdown fails with ShutdownError (or had finished with
    the right object); its second step never lands in the runtime started after it. A rank that
    starts it only after its peers' shutdown has stopped its runtime gets the ShutdownError
    from the call itself."""
    fails = []
    for i in range(10):
        hvd.init()
        try:
            h = hvd.broadcast_object_async({"i": i}, 0, name=f"across.{i}")
        except hvd.ShutdownError:
            h = None
        hvd.shutdown()
        hvd.init()
        try:
            if h is None:
                raise hvd.ShutdownError("raised by the call")
            got = h.synchronize()
            if got != {"i": i}:
                fails.append(f"round {i}: {got!r}")
        except hvd.ShutdownError:
            pass
        except Exception as e:  # noqa: BLE001 - any other outcome is the failure
            fails.append(f"round {i}: {type(e).__name__}: {e}")
        got = hvd.allreduce(np.ones(2), op=hvd.Sum, name=f"after.{i}")
        if not np.array_equal(got, np.full(2, float(hvd.size()))):
            fails.append(f"round {i}: allreduce after re-init {got}")
        hvd.shutdown()
    hvd.init()
    assert_everywhere(fails)
