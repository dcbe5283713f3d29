"""Rank side: bad input raises a clear error on every rank, and never corrupts memory or hangs."""
import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
from helpers import assert_everywhere, expect_raise_everywhere

RANK, N = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


def test_calls_before_init_raise():
    assert not hvd.is_initialized()
    for fn in (hvd.rank, hvd.size, hvd.local_rank, hvd.cross_size, hvd.mpi_threads_supported,
               lambda: hvd.allreduce(np.ones(3))):
        expect_raise_everywhere(fn, hvd.NotInitializedError, "hvlite.init()")
    expect_raise_everywhere(hvd.rank, ValueError)   # Horovod's built-in type


def test_init_is_idempotent():
    hvd.init()
    rt = hvd._current()
    hvd.init()
    assert hvd._current() is rt and hvd.size() == N and hvd.rank() == RANK


def test_unsupported_dtype_on_every_rank():
    hvd.init()
    expect_raise_everywhere(lambda: hvd.allreduce(np.ones(4, np.complex64)), hvd.DtypeError,
                            "complex64", "float32", "int8")
    expect_raise_everywhere(lambda: hvd.allreduce(np.ones(4, np.complex64)), TypeError)


def test_unsupported_dtype_on_one_rank_fails_everywhere():
    hvd.init()
    x = np.ones(4, np.complex64 if RANK == N - 1 else np.float32)
    if N == 1:  # the one rank is every rank: its own error, not a disagreement
        expect_raise_everywhere(lambda: hvd.allreduce(x, name="grad.w"), hvd.DtypeError, "grad.w")
        return
    if RANK == N - 1:   # the culprit raises its own error at once; the others learn of it
        expect_raise_everywhere(lambda: hvd.allreduce(x, name="grad.w"), hvd.DtypeError, "complex64")
    else:
        expect_raise_everywhere(lambda: hvd.allreduce(x, name="grad.w"), hvd.MismatchError,
                                "grad.w", f"rank {N - 1}", "complex64")


@pytest.mark.parametrize("field", ["count", "dtype", "op", "algorithm"])
def test_mismatched_metadata_raises_everywhere_without_touching_buffers(field):
    hvd.init()
    odd = RANK == N - 1 and N > 1
    count = 10 + (2 if odd and field == "count" else 0)
    dtype = np.float64 if odd and field == "dtype" else np.float32
    op = hvd.Max if odd and field == "op" else hvd.Sum
    algo = "tree" if odd and field == "algorithm" else "ring"
    x = np.arange(count, dtype=dtype)
    before = x.copy()
    if N == 1:
        hvd.allreduce_(x, op=op, algorithm=algo)
        return
    expect_raise_everywhere(lambda: hvd.allreduce_(x, op=op, algorithm=algo, name="layer1.bias"),
                            hvd.MismatchError, "layer1.bias", "disagree", f"rank {N - 1}")
    assert_everywhere([] if np.array_equal(x, before) else ["buffer changed by a failed call"])
    # The runtime is still usable afterwards.
    y = hvd.allreduce(np.ones(5), op=hvd.Sum)
    assert_everywhere([] if np.all(y == N) else [f"after mismatch: {y}"])


def test_read_only_in_place():
    hvd.init()
    x = np.ones(6)
    x.flags.writeable = False
    expect_raise_everywhere(lambda: hvd.allreduce_(x), hvd.InvalidArgumentError, "read-only")
    got = hvd.allreduce(x, op=hvd.Sum)          # out of place is fine on read-only input
    assert_everywhere([] if np.all(got == N) else [f"read-only out-of-place: {got}"])
    if N > 1:
        y = np.ones(6)
        y.flags.writeable = RANK != 0
        expect_raise_everywhere(lambda: hvd.allreduce_(y, name="ro"),
                                hvd.InvalidArgumentError if RANK == 0 else hvd.MismatchError,
                                "read-only", *(["rank 0"] if RANK else []))


def test_bad_op_and_algorithm_named():
    hvd.init()
    expect_raise_everywhere(lambda: hvd.allreduce(np.ones(2), op="median"),
                            hvd.InvalidArgumentError, "median")
    expect_raise_everywhere(lambda: hvd.allreduce(np.ones(2), algorithm="butterfly"),
                            hvd.InvalidArgumentError, "butterfly", "ring")
    if N > 1:
        algo = "butterfly" if RANK == 0 else "ring"
        expect_raise_everywhere(lambda: hvd.allreduce(np.ones(2), algorithm=algo, name="b"),
                                hvd.InvalidArgumentError if RANK == 0 else hvd.MismatchError,
                                "butterfly", *(["rank 0"] if RANK else []))
    expect_raise_everywhere(lambda: hvd.allreduce_([1.0, 2.0]), hvd.InvalidArgumentError, "NumPy")


def test_lean_reducescatter_and_alltoall_errors_reach_every_rank():
    """Plain arrays take the lean path for reducescatter and alltoall: a rank whose call differs
    (another dtype; rows the set does not divide) still fails every rank, the call named."""
    hvd.init()
    if N == 1:
        return
    odd = RANK == N - 1
    x = np.ones((2 * N, 3), np.float64 if odd else np.float32)
    expect_raise_everywhere(lambda: hvd.reducescatter(x, op=hvd.Sum, name="rs.bad"),
                            hvd.MismatchError, "rs.bad", f"rank {N - 1}")
    y = np.ones((2 * N + (1 if odd else 0), 3), np.float32)
    expect_raise_everywhere(lambda: hvd.alltoall(y, name="a2a.bad"),
                            hvd.InvalidArgumentError if odd else hvd.MismatchError, "a2a.bad",
                            "split evenly" if odd else f"rank {N - 1}")
    z = hvd.reducescatter(np.ones((N, 2), np.float32), op=hvd.Sum)    # still usable
    assert_everywhere([] if np.all(z == N) else [f"after the errors: {z}"])


def test_mpi_errors_carry_mpi_message():
    hvd.init()
    from hvlite._core.engine import error_string, raise_for_code
    for cls in (MPI.ERR_TRUNCATE, MPI.ERR_RANK, MPI.ERR_COMM):
        want = MPI.Get_error_string(cls)
        assert error_string(cls) == want
        with pytest.raises(hvd.MPIError) as info:
            raise_for_code(cls)
        assert want in str(info.value) and info.value.code == cls
        assert isinstance(info.value, RuntimeError)


def test_shutdown_then_reinit():
    hvd.init()
    hvd.shutdown()
    hvd.shutdown()
    expect_raise_everywhere(lambda: hvd.allreduce(np.ones(2)), hvd.NotInitializedError)
    hvd.init()
    got = hvd.allreduce(np.ones(2), op=hvd.Sum)
    assert_everywhere([] if np.all(got == N) else [f"after re-init: {got}"])
