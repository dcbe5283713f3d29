"""Rank side: a buffer of more than 2^31 elements (and bytes) through every algorithm.

MPI counts are C ints, so the core cuts such buffers into pieces; this proves the pieces line up.
"""
import numpy as np
import pytest

import hvlite as hvd
from helpers import assert_everywhere

COUNT = (1 << 31) + 13          # int8: over 2^31 elements and bytes
PERIOD = 251
CHUNK = 64 << 20

hvd.init()
N, RANK = hvd.size(), hvd.rank()


def fill(x, pattern):
    for o in range(0, x.size, CHUNK):
        part = x[o:o + CHUNK]
        part[:] = np.resize(np.roll(pattern, -(o % PERIOD)), part.size)


def mismatches(x, pattern):
    bad = []
    for o in range(0, x.size, CHUNK):
        part = x[o:o + CHUNK]
        want = np.resize(np.roll(pattern, -(o % PERIOD)), part.size)
        if not np.array_equal(part, want):
            bad.append(o + int(np.flatnonzero(part != want)[0]))
    return bad


@pytest.fixture(scope="module")
def buf():
    return np.empty(COUNT, dtype=np.int8)


@pytest.mark.parametrize("algo", ["ring", "rhd", "rd", "tree", "mpi"])
def test_over_two_to_the_31(buf, algo):
    mine = (np.arange(PERIOD) % 50 + RANK).astype(np.int8)
    want = sum((np.arange(PERIOD) % 50 + r).astype(np.int8) for r in range(N)).astype(np.int8)
    fill(buf, mine)
    hvd.allreduce_(buf, op=hvd.Sum, algorithm=algo)
    bad = mismatches(buf, want)
    assert_everywhere([f"{algo}: first wrong element at {bad[0]}"] if bad else [])
