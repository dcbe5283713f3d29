"""Run by test_alltoall_bounds.py at 3 ranks: splits whose int64 sum wraps, and counts that only
the core can see (a rank bypassing the Python checks, as a corrupt or hostile peer would): more
rows than it has, or fewer splits than ranks."""
import numpy as np

import hvlite as hvd
from hvlite._core.codes import COLLECTIVES, DTYPES
from hvlite._core.submission import Submission

hvd.init()
r, n = hvd.rank(), hvd.size()
x = np.arange(8 * 2, dtype=np.float32).reshape(8, 2) + 100 * r

# 1. splits that pass an int64 check (their int64 sum wraps to 8 or to 4) on rank 1
for wrapping in ([2 ** 63 - 1, 2 ** 63 - 1, 10], [2 ** 63 - 1, 2 ** 63 - 1, 6]):
    splits = wrapping if r == 1 else [3, 3, 2]
    try:
        hvd.alltoall(x, splits=splits, name=f"wrap.{wrapping[2]}")
        print(f"rank {r}: no error for {wrapping}", flush=True)
    except hvd.InvalidArgumentError as e:      # the rank that passed them
        assert r == 1 and "non-negative row counts summing to at most the first dimension 8" in str(e), e
        print(f"rank {r}: refused splits: {e}", flush=True)
    except hvd.MismatchError as e:             # the others learn of it, naming rank 1
        assert r != 1 and "rank 1" in str(e), e
        print(f"rank {r}: peer refused: {e}", flush=True)

# 2. negative and huge counts, and counts past the rank's own rows, reaching the core (submitted
# past the Python checks on rank 2): refused before a row is read, on one node's segment or MPI
st = hvd._current().global_state
for bad in ([-1, 5, 4], [2 ** 40, 2 ** 40, -(2 ** 41) + 8], [5, 5, 5], [2, 2]):
    splits = bad if r == 2 else [3, 3, 2]
    p = st.coordinator.submit(f"core.{bad[0]}", Submission(
        COLLECTIVES.index("alltoall"), DTYPES.index("float32"), splits=splits), x, None)
    p.wait()
    assert p.status == 2, f"rank {r}: status {p.status} for counts {bad}"
    assert "count out of range" in p.error, p.error
    print(f"rank {r}: core refused {bad}: {p.error}", flush=True)
    p.release()

# 3. the runtime is still right afterwards
got, recv = hvd.alltoall(x, splits=[3, 3, 2], name="after")
want = np.concatenate([(np.arange(16, dtype=np.float32).reshape(8, 2) + 100 * q)
                       [[0, 3, 6][r]:[3, 6, 8][r]] for q in range(n)])
assert np.array_equal(got, want) and list(recv) == [[3, 3, 2][r]] * n, (got, recv)
print(f"rank {r}: alltoall after the refusals is right", flush=True)

# 4. splits that add up to fewer rows than the array has: the rows past them stay unsent
# (Horovod's rule; a padded buffer sends its filled rows only)
got, recv = hvd.alltoall(x, splits=[1, 2, 0], name="fewer")
want = np.concatenate([(np.arange(16, dtype=np.float32).reshape(8, 2) + 100 * q)
                       [[0, 1, 3][r]:[1, 3, 3][r]] for q in range(n)])
assert np.array_equal(got, want) and list(recv) == [[1, 2, 0][r]] * n, (got, recv)
print(f"rank {r}: splits summing below the first dimension send those rows", flush=True)
hvd.shutdown()
