"""Rank side: Horovod's duplicate-name rule. Rank 0 submits a named collective, drops its handle
(or keeps it) and submits the same name again while the other ranks wait in a barrier: the
second call raises DuplicateNameError (a ValueError naming the tensor) at once, on every
collective and both APIs. Waiting for the first request instead would deadlock: it needs the
ranks that sit in the barrier. Afterwards the others submit the name, the dropped request
completes with the right result, and the runtime holds none of its buffers."""
import gc
import time
import weakref

import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
from helpers import assert_everywhere

hvd.init()
RANK, N = hvd.rank(), hvd.size()
ROWS = 2 * N


def calls():
    """name -> (start it asynchronously, run it synchronously) for every collective."""
    def arr():
        return np.full((ROWS, 3), RANK + 1.0, np.float32)
    return {
        "allreduce": (lambda nm: hvd.allreduce_async(arr(), op=hvd.Sum, name=nm),
                      lambda nm: hvd.allreduce(arr(), op=hvd.Sum, name=nm)),
        "allreduce_": (lambda nm: hvd.allreduce_async_(arr(), op=hvd.Sum, name=nm),
                       lambda nm: hvd.allreduce_(arr(), op=hvd.Sum, name=nm)),
        "grouped_allreduce": (
            lambda nm: hvd.grouped_allreduce_async([arr(), arr()], op=hvd.Sum, name=nm),
            lambda nm: hvd.grouped_allreduce([arr(), arr()], op=hvd.Sum, name=nm)),
        "allgather": (lambda nm: hvd.allgather_async(arr(), name=nm),
                      lambda nm: hvd.allgather(arr(), name=nm)),
        "broadcast": (lambda nm: hvd.broadcast_async(arr(), 0, name=nm),
                      lambda nm: hvd.broadcast(arr(), 0, name=nm)),
        "alltoall": (lambda nm: hvd.alltoall_async(arr(), name=nm),
                     lambda nm: hvd.alltoall(arr(), name=nm)),
        "reducescatter": (lambda nm: hvd.reducescatter_async(arr(), op=hvd.Sum, name=nm),
                          lambda nm: hvd.reducescatter(arr(), op=hvd.Sum, name=nm)),
        "broadcast_object": (lambda nm: hvd.broadcast_object_async({"r": RANK}, 0, name=nm),
                             lambda nm: hvd.broadcast_object({"r": RANK}, 0, name=nm)),
        "allgather_object": (lambda nm: hvd.allgather_object_async(RANK, name=nm),
                             lambda nm: hvd.allgather_object(RANK, name=nm)),
    }


KINDS = sorted(calls())


@pytest.mark.parametrize("held", [False, True], ids=["dropped", "held"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_name_in_flight_is_refused_at_once_while_the_peer_waits(kind, held):
    start, run = calls()[kind]
    name = f"duplicate_name.{kind}.{held}"
    failures = []
    hvd.barrier()
    keep = None
    if RANK == 0:
        keep = start(name)
        if not held:
            keep = None
            gc.collect()
        t0 = time.monotonic()
        try:
            for _ in range(10):
                start(name)
            failures.append(f"{kind}: a second {name!r} was not refused")
        except hvd.DuplicateNameError as e:
            took = time.monotonic() - t0
            if not isinstance(e, ValueError) or name not in str(e) or "in flight" not in str(e):
                failures.append(f"{kind}: {type(e).__mro__}: {e}")
            # (an object collective's first step is held by the chain that runs its second)
            if ("dropped" in str(e)) == held and not kind.endswith("_object"):
                failures.append(f"{kind}: the message gets the handle's state wrong: {e}")
            if took > 5.0:          # refused, not waited for: the others are in the barrier
                failures.append(f"{kind}: refused only after {took:.1f}s")
    hvd.barrier()
    # the others now submit the name: rank 0's first request completes, handle or not
    if RANK != 0 and N > 1:
        run(name)
    if keep is not None:
        keep.synchronize()
    hvd.barrier()
    assert_everywhere(failures)


def test_the_dropped_request_completes_right_and_is_released():
    name = "duplicate_name.release"
    hvd.barrier()
    ref = None
    if RANK == 0:
        x = np.full(1 << 16, 1.0, np.float32)
        ref = weakref.ref(x)
        hvd.allreduce_async_(x, op=hvd.Sum, name=name)
        del x
        with pytest.raises(hvd.DuplicateNameError):
            hvd.allreduce_async(np.ones(3, np.float32), name=name)
    hvd.barrier()
    if RANK != 0:
        got = hvd.allreduce(np.full(1 << 16, 1.0, np.float32), op=hvd.Sum, name=name)
        assert np.all(got == N)
    hvd.barrier()
    failures = []
    if ref is not None:
        gc.collect()
        if ref() is not None and N > 1:
            failures.append("the dropped request's buffer is still held after it completed")
    assert_everywhere(failures)


def test_an_automatic_name_coming_round_again_is_waited_for_not_refused():
    """Unnamed calls cycle through 60 automatic names: the 61st finds the first still in
    flight when its handle was dropped, and waits for it (every rank submits it) instead of
    failing; all 70 results are right."""
    handles = [hvd.allreduce_async(np.full(5, RANK + k, np.float32), op=hvd.Sum)
               for k in range(70)]
    kept = handles[60:]
    del handles
    want = [N * k + N * (N - 1) / 2 for k in range(60, 70)]
    failures = [f"call {60 + i}" for i, h in enumerate(kept)
                if not np.all(h.synchronize() == want[i])]
    assert_everywhere(failures)


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "fp16"])
def test_a_call_that_failed_here_is_retried_under_its_name(compressed):
    """Rank 0's array is read-only, so its in-place call fails there and goes out poisoned;
    every rank raises. Every rank then retries at once under the same name: rank 0's
    poisoned request is waited for (it completes as the peers' calls meet it), not refused
    as a name in flight (that left the peers waiting in their retry)."""
    from hvlite.compression import Compression
    kw = dict(compression=Compression.fp16) if compressed else {}
    name = f"retry.{'fp16' if compressed else 'plain'}"
    failures = []
    for attempt in range(3):        # no sync point between a failure and its retry
        x = np.full(8, RANK + 1.0, np.float32)
        if RANK == 0:
            x.flags.writeable = False
        try:
            hvd.allreduce_(x, op=hvd.Sum, name=name, **kw)
            failures.append(f"attempt {attempt}: the read-only call ran")
        except hvd.HvliteError as e:
            if "read-only" not in str(e):
                failures.append(f"attempt {attempt}: {type(e).__name__}: {e}")
        y = np.full(8, RANK + 1.0, np.float32)
        try:
            got = hvd.allreduce_(y, op=hvd.Sum, name=name, **kw)
            if not np.array_equal(got, np.full(8, N * (N + 1) / 2)):
                failures.append(f"attempt {attempt}: the retry gave {got}")
        except hvd.HvliteError as e:
            failures.append(f"attempt {attempt}: the retry raised {type(e).__name__}: {e}")
    assert_everywhere(failures)


def test_errors_subclass_what_horovod_callers_catch():
    assert issubclass(hvd.DuplicateNameError, ValueError)
    assert issubclass(hvd.DuplicateNameError, hvd.InvalidArgumentError)
    assert issubclass(hvd.MismatchError, RuntimeError)
    hvd.barrier()
    if RANK == 0:
        h = hvd.allreduce_async(np.ones(2, np.float32), name="dup.plain")
        with pytest.raises(ValueError, match="dup.plain"):
            hvd.allreduce(np.ones(2, np.float32), name="dup.plain")
    hvd.barrier()
    if RANK != 0:
        hvd.allreduce(np.ones(2, np.float32), name="dup.plain")
    else:
        h.synchronize()
    hvd.barrier()


def test_the_error_tree_matches_horovods():
    """Horovod's callers catch ValueError for arguments, RuntimeError for operations it does not
    offer and HorovodInternalError for collectives that could not complete."""
    from hvlite.elastic import HorovodInternalError
    for cls in (hvd.ShutdownError, hvd.StallError, hvd.LostRankError, hvd.MPIError):
        assert issubclass(cls, HorovodInternalError) and issubclass(cls, RuntimeError), cls
    assert issubclass(hvd.UnsupportedOperationError, NotImplementedError)
    for cls in (hvd.InvalidArgumentError, hvd.DuplicateNameError, hvd.NotInitializedError):
        assert issubclass(cls, ValueError) and not issubclass(cls, HorovodInternalError), cls
