"""The shared output arena (_core/shm/arena.pyx): page blocks reused by size, a mapping of it by
another process's path to its memfd sees the same bytes, a new block comes with its pages, and a
full arena says so."""
import os

import numpy as np
import pytest

from hvlite._core.shm import arena

A = arena.shared()
pytestmark = pytest.mark.skipif(A is None, reason="no memfd on this kernel")


def test_blocks_are_whole_pages_reused_by_size():
    b = A.take(5000)
    assert len(memoryview(b)) == 5000
    at = np.frombuffer(b, np.uint8).ctypes.data
    assert (at - A.address) % 4096 == 0
    other = A.take(5000)                     # two pages each: not the same place
    assert np.frombuffer(other, np.uint8).ctypes.data not in (at, at + 4096)
    del b
    again = A.take(8192)                     # the same size class: the freed block
    assert np.frombuffer(again, np.uint8).ctypes.data == at
    del other, again


def test_an_array_keeps_its_block_and_is_writable():
    x = np.frombuffer(A.take(1 << 16), np.float32)
    x[:] = 3
    at = x.ctypes.data
    fresh = np.frombuffer(A.take(1 << 16), np.float32)
    assert fresh.ctypes.data != at and (x == 3).all()


def test_a_mapping_through_the_memfd_sees_the_same_bytes():
    x = np.frombuffer(A.take(4096), np.int64)
    x[:] = np.arange(512)
    peer = arena.map_peer(os.getpid(), A.fd, A.cap)
    assert peer
    try:
        off = x.ctypes.data - A.address
        seen = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_int64 * 512).from_address(peer + off))
        assert (seen == np.arange(512)).all()
        seen[7] = -1                         # and writes through it land in the array
        assert x[7] == -1
    finally:
        arena.unmap_peer(peer, A.cap)
    assert arena.map_peer(os.getpid(), 10**6, A.cap) == 0      # no such descriptor


@pytest.mark.parametrize("nbytes", [64 << 10, 2 << 20])
def test_a_new_block_is_populated_when_taken(nbytes):
    """Its pages are allocated by take(), not by the collective that writes the result: there
    they cost ~4 us a page, inside the calls auto times to choose an algorithm."""
    import resource

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    x = np.frombuffer(A.take(nbytes), np.uint8)
    before = faults()
    x[:] = 1
    assert faults() - before < 8, f"{faults() - before} page faults writing a new block"


def test_a_full_arena_gives_none():
    assert A.take(A.cap + 1) is None
