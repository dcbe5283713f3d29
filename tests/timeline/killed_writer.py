"""Writes a trace, waits for the writer to flush, then dies by SIGKILL (no stop, no close)."""
import os
import signal
import sys
import time

import numpy as np

import hvlite as hvd

hvd.init()
hvd.start_timeline(sys.argv[1])
for i in range(5):
    with hvd.timeline.span(f"work{i}"):
        hvd.allreduce(np.ones(10), name=f"t{i}")
time.sleep(0.6)
os.kill(os.getpid(), signal.SIGKILL)
