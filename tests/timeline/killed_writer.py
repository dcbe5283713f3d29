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
# The writer flushes every 0.2 s: wait until all five tensors are on disk (30 s at most, however
# late the writer thread is scheduled), then die without closing the file.
deadline = time.time() + 30
while time.time() < deadline:
    with open(sys.argv[1]) as f:
        text = f.read()
    if all(f'"t{i}"' in text for i in range(5)) and text.count('"work') >= 5:
        break
    time.sleep(0.05)
os.kill(os.getpid(), signal.SIGKILL)
