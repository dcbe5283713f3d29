"""Rank side of tests/_core/test_cache_variants.py: the response cache holds a name in several
variants (one per metadata it was agreed with), so a loop of any count of unnamed calls, shapes
and ops mixed, agrees through the cache once warm (no trip to rank 0), as does a named tensor
whose shape alternates; a rank whose k-th call differs still gets the mismatch on every rank,
and the loop goes on right afterwards."""
import sys

import numpy as np

import hvlite as hvd
from hvlite._core.coordinator import _conflict_after

hvd.init()
r, n = hvd.rank(), hvd.size()
coord = hvd._current().global_state.coordinator
fails = []
SIZES = [k * 97 + 13 for k in range(1, 9)]      # 8 distinct sizes: 110 .. 789 values


def slow_rounds():
    return coord.stats()["slow_rounds"]


def call(k, op=hvd.Sum, size=None, dtype=np.float32):
    x = np.full(size or SIZES[k % len(SIZES)], r + 1, dtype)
    got = hvd.allreduce_(x, op=op)
    want = n * (n + 1) / 2 if op == hvd.Sum else (n + 1) / 2
    if not np.allclose(got, want):
        fails.append(f"call {k}: wrong result {got[:2]}")


def loop_call(k, size=None, op=None):
    """The loop's k-th call: Average every third, float64 the third."""
    call(k, op=op or (hvd.Sum if k % 3 else hvd.Average), size=size,
         dtype=np.float64 if k == 2 else np.float32)


def loop(steps, p):
    for _ in range(steps):
        for k in range(p):
            loop_call(k)


def warm_then_count(what, run, warm_steps):
    """Trips to rank 0 in 10 steps of `run` after `warm_steps` steps (no rank gives up a
    cached slot meanwhile, however slow the machine makes it: _conflict_after)."""
    for _ in range(warm_steps):
        run()
    before = slow_rounds()
    for _ in range(10):
        run()
    trips = slow_rounds() - before
    if trips:
        fails.append(f"{what}: {trips} trips to rank 0 in 10 warm steps")


_conflict_after(3600.0)
for p in (6, 7, 8, 11):      # unnamed calls a step; their k-th name comes round every 60 calls
    warm_then_count(f"{p} unnamed calls a step", lambda: loop(1, p), int(np.lcm(p, 60)) // p + 1)
x = np.ones(1024, np.float32)
warm_then_count("40 Sum then 40 Average on one array",
                lambda: [hvd.allreduce_(x, op=hvd.Sum if i < 40 else hvd.Average)
                         for i in range(80)], 4)
warm_then_count("a named tensor whose shape alternates",
                lambda: [hvd.allreduce(np.ones(s, np.float32), name="alt") for s in (5, 9)], 1)

# A rank whose 4th call differs: the mismatch on every rank, whichever rank it is (rank 0's
# own odd call waits CONFLICT_SECONDS first), and the loop goes on. A hang fails the test at
# mpirun's timeout.
_conflict_after(0.25)
loop(int(np.lcm(7, 60)) // 7 + 1, 7)             # every variant cached
for bad in ([1, 0] if n > 1 else []):
    for k in range(7):
        size = 5 if (k == 3 and r == bad) else None
        try:
            call(k, size=size)
            if k == 3:
                fails.append(f"rank {bad}'s odd call ran")
        except hvd.MismatchError as e:
            if k != 3:
                fails.append(f"call {k}: {e}")
            elif "(5,)" not in str(e):
                fails.append(f"the mismatch does not name the odd shape: {e}")
    loop(2, 7)                                    # right again
# The odd call matches another cached variant of its name (each rank hits a different slot):
# still the mismatch everywhere (each rank gives up its slot after CONFLICT_SECONDS).
loop(int(np.lcm(7, 60)) // 7 + 1, 7)
for bad in ([1, 0] if n > 1 else []):
    for k in range(7):
        odd = k == 3 and r == bad           # shaped as the loop's 4th call: Sum, SIZES[4]
        try:
            if odd:
                loop_call(4, size=SIZES[4], op=hvd.Sum)
            else:
                loop_call(k)
            if k == 3:
                fails.append(f"rank {bad}'s call shaped like another variant ran")
        except hvd.MismatchError as e:
            if k != 3:
                fails.append(f"call {k}: {e}")
    loop(2, 7)
print(f"rank {r}: {'FAIL ' + '; '.join(fails) if fails else 'variants ok'}", flush=True)
hvd.shutdown()
sys.exit(1 if fails else 0)
