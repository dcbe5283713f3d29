"""The completion protocol (hvlite.work) in-process, the code tables, and ownership of in-flight
buffers under mpiexec: dropped handles, aborted steps, orphaned names."""
import os
import threading

import pytest

from hvlite.work import ChainHandle, Composite, GroupHandle, Mapped, Work


class Fake(Work):
    """A handle finished from outside, as the coordinator finishes a request."""
    __slots__ = ("event", "value", "error", "collected")

    def __init__(self, value=None, error=None):
        super().__init__()
        self.event, self.value, self.error, self.collected = threading.Event(), value, error, 0

    def _ready(self):
        return self.event.is_set()

    def _block(self):
        self.event.wait()

    def _collect(self):
        self.collected += 1
        if self.error is not None:
            raise self.error
        return self.value


def test_settles_once_and_keeps_the_outcome():
    h = Fake(value=3)
    assert not h.poll()
    h.event.set()
    assert h.poll() and h.wait()
    assert h.synchronize() == 3 and h.result() == 3 and h() == 3 and h.exception() is None
    assert h.collected == 1
    bad = Fake(error=ValueError("boom"))
    bad.event.set()
    assert isinstance(bad.exception(), ValueError)
    for _ in range(2):
        with pytest.raises(ValueError, match="boom"):
            bad.synchronize()
    assert bad.collected == 1


def test_a_group_synchronizes_every_part_and_raises_the_first_error():
    parts = [Fake(value=1), Fake(error=RuntimeError("first")), Fake(error=KeyError("second")),
             Fake(value=4)]
    for p in parts:
        p.event.set()
    g = GroupHandle(parts)
    with pytest.raises(RuntimeError, match="first"):
        g.synchronize()
    assert all(p.collected == 1 for p in parts)
    ok = GroupHandle([Fake(value=i) for i in range(3)])
    for p in ok.handles:
        p.event.set()
    assert ok.synchronize() == [0, 1, 2]


def test_chains_and_maps_run_their_function_once():
    first = Fake(value=2)
    calls = []
    chain = ChainHandle(first, lambda v: calls.append(v) or v * 10)
    mapped = Mapped(chain, lambda v: v + 1)
    assert not mapped.poll()
    first.event.set()
    assert mapped.synchronize() == 21 and mapped() == 21 and calls == [2]
    both = Composite([Fake(value="a"), Fake(value="b")], "".join)
    for p in both.parts:
        p.event.set()
    assert both.result() == "ab"


def test_code_tables_are_declared_once():
    from hvlite import config, ops, submit
    from hvlite._core import codes, dtypes
    assert [m.name for m in ops.ReduceOp] == list(codes.OPS)
    assert [submit._KIND[i] for i in range(len(codes.COLLECTIVES))] == list(codes.COLLECTIVES)
    assert config.ALGORITHMS is codes.ALGORITHMS        # one table, read from codes.h
    assert [codes.ALGORITHMS.code(a) for a in codes.ALGORITHMS] == list(range(len(codes.ALGORITHMS)))
    assert codes.ALGORITHMS.code("no such") is None and codes.ALGORITHMS.code([]) is None
    assert dtypes.NAMES == codes.DTYPES
    assert [dtypes.size_of(i) for i in range(len(codes.DTYPES))] == list(codes.DTYPE_SIZES)
    assert codes.ERROR_KINDS[0] == "none" and len(codes.OWN_ERRORS) >= 4


@pytest.mark.parametrize("n", [2, 3])
def test_runtime_owns_in_flight_buffers(mpirun, n):
    """10,000 dropped handles of every collective, aborted steps, orphaned names, re-init."""
    out = mpirun(n, "tests/mpi_ownership.py", "-s", timeout=600)
    assert f"dropped {os.environ.get('HVLITE_TEST_DROPS', '10000')} handles" in out
