"""The pool of out-of-place results (hvlite/outputs.py): reused only when nobody else holds
the previous result, only for names that come back, never for small arrays or automatic names,
bounded in bytes."""
import weakref

import numpy as np

from hvlite import outputs
from hvlite.outputs import OutputPool

BIG = np.zeros(1 << 15, np.float32)         # 128 KiB


def test_a_result_nobody_holds_is_reused():
    pool = OutputPool()
    pool.take("g", BIG)                 # a name's first call keeps nothing
    assert not pool.arrays
    first = pool.take("g", BIG)
    ref = weakref.ref(first)
    del first
    assert pool.take("g", BIG) is ref()


def test_a_result_still_held_is_never_reused():
    pool = OutputPool()
    pool.take("g", BIG)
    pool.take("h", BIG)
    held = pool.take("g", BIG)
    held[:] = 7
    again = pool.take("g", BIG)
    assert again is not held and (held == 7).all()
    view = again[10:20]
    del again
    third = pool.take("g", BIG)         # the view keeps the second one alive
    assert third.base is None and view.base is not third
    kept = [pool.take("h", BIG)]
    assert pool.take("h", BIG) is not kept[0]


def test_a_loop_that_holds_its_last_result_reuses_the_one_before():
    # y = allreduce(x, name="g") in a loop: y still holds the last result during the next call
    pool = OutputPool()
    pool.take("g", BIG)
    y = pool.take("g", BIG)
    ids = set()
    for step in range(6):
        last = y
        y = pool.take("g", BIG)
        assert y is not last
        ids.add(id(y))
    assert len(ids) == 2 and pool.nbytes == 2 * BIG.nbytes
    held = [pool.take("g", BIG) for _ in range(3)]          # all held: new ones
    assert len({id(a) for a in held}) == 3 and all(a is not y for a in held)


def test_kept_results_come_from_the_allocator_when_given():
    blocks = []

    def allocate(nbytes):           # a stand-in for the shared arena; None: it is full
        if len(blocks) >= 2:
            return None
        blocks.append(bytearray(nbytes))
        return blocks[-1]
    pool = OutputPool(allocate)
    first = pool.take("g", BIG)             # a name's first call: NumPy's
    assert first.base is None and not blocks
    kept = pool.take("g", BIG)
    assert kept.shape == BIG.shape and kept.dtype == BIG.dtype and len(blocks) == 1
    assert kept.base is not None and kept.flags.writeable
    ref = weakref.ref(kept)
    del kept
    assert pool.take("g", BIG) is ref()     # reused, no new block
    pool.take("h", BIG)
    pool.take("h", BIG)
    pool.take("i", BIG)
    assert pool.take("i", BIG).base is None and len(blocks) == 2    # full: NumPy's again


def test_other_shapes_and_dtypes_and_small_arrays_get_new_arrays():
    pool = OutputPool()
    pool.take("g", BIG)
    a = pool.take("g", BIG)
    ref = weakref.ref(a)
    del a
    b = pool.take("g", BIG.astype(np.float64))
    assert b.dtype == np.float64 and ref() is None
    small = np.zeros(16, np.float32)
    s1 = pool.take("s", small)
    ref = weakref.ref(s1)
    del s1
    assert "s" not in pool.arrays and ref() is None
    for _ in range(3):
        pool.take("auto", BIG, keep=False)
    assert "auto" not in pool.arrays


def test_names_used_once_hold_no_memory():
    pool = OutputPool()
    for step in range(100):
        pool.take(f"grad.{step}", BIG)
    assert pool.nbytes == 0 and not pool.arrays


def test_the_pool_is_bounded(monkeypatch):
    monkeypatch.setattr(outputs, "MAX_BYTES", 3 * BIG.nbytes)
    pool = OutputPool()
    for i in range(10):
        pool.take(f"n{i}", BIG)
        pool.take(f"n{i}", BIG)
    assert pool.nbytes <= 3 * BIG.nbytes and list(pool.arrays) == ["n7", "n8", "n9"]


def test_shaped_takes_are_pooled_like_the_others():
    # allgather and alltoall: the pool is asked by shape; None where the core allocates itself
    pool = OutputPool()
    f32 = np.dtype(np.float32)
    assert pool.take_shaped("g", (10, 3), f32) is None                # small
    # under GATHERED_MIN_BYTES (128 KiB here): a new array costs less than the pool's call
    assert pool.take_shaped("g", (1 << 14, 2), f32) is None and not pool.seen
    assert pool.take_shaped("g", (1 << 17,), f32, keep=False) is None  # not the caller's name
    first = pool.take_shaped("g", (1 << 16, 2), f32)       # the first call keeps nothing
    assert first.shape == (1 << 16, 2) and first.dtype == f32 and not pool.arrays
    kept = pool.take_shaped("g", (1 << 16, 2), f32)
    ref = weakref.ref(kept)
    del kept
    assert pool.take_shaped("g", (1 << 16, 2), f32) is ref()
    held = pool.take_shaped("g", (1 << 16, 2), f32)                    # still held: a new one
    assert held is not pool.take_shaped("g", (1 << 16, 2), f32)
    assert pool.take_shaped("g", (1 << 15, 2), f32).shape == (1 << 15, 2)
