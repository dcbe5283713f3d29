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
