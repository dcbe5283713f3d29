"""Rank side, run with HVLITE_STALL_CHECK_TIME_SECONDS=1 and HVLITE_STALL_SHUTDOWN_TIME_SECONDS=3:
each rank waits on a name no other rank submits. The stall is reported, then every rank fails
with a StallError naming the missing ranks, and the dead coordinator refuses later calls."""
import os
import time

import numpy as np

import hvlite as hvd
from helpers import assert_everywhere, expect_raise_everywhere

hvd.init()
N, RANK = hvd.size(), hvd.rank()


# STALL_ODD_NAME=1: a name with a NUL and a newline, 100 KB long: reports and errors show it
# escaped and cut, its length said
ODD = "\x00tail\n" + "x" * 100000 if os.environ.get("STALL_ODD_NAME") else ""


def test_stall_becomes_an_error_on_every_rank():
    t0 = time.monotonic()
    h = hvd.allreduce_async(np.ones(3), name=f"only.on.rank{RANK}{ODD}")
    expect_raise_everywhere(h.synchronize, hvd.StallError, "only.on.rank", "not submitted",
                            *(["\\x00tail\\x0a", f"({len(ODD) + 13} bytes)"] if ODD else []))
    if ODD:
        try:
            h.synchronize()
        except hvd.StallError as e:
            assert len(str(e)) < 2000, len(str(e))
    took = time.monotonic() - t0
    assert_everywhere([] if 2.5 < took < 30 else [f"stall error after {took:.1f}s"])
    expect_raise_everywhere(lambda: hvd.allreduce(np.ones(2)), hvd.StallError)
