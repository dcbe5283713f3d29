"""Run by test_timeline_write_error: the trace file stops taking writes part-way (a size limit,
as a full disk would): the writer says so at once, stop_timeline() raises OSError naming the
file, the trace loads up to its last complete event, and collectives go on right."""
import resource
import signal
import sys

import numpy as np

import hvlite as hvd

path = sys.argv[1]
hvd.init()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, resource.RLIM_INFINITY))
hvd.start_timeline(path)
x = np.ones(256, np.float32)
for i in range(3000):
    hvd.allreduce_(x, op=hvd.Sum, name=f"grad.{i % 500}")
try:
    hvd.stop_timeline()
    print("no error from stop_timeline", flush=True)
except OSError as e:
    assert path in str(e) and "last complete event" in str(e), e
    print(f"stop_timeline raised: {e}", flush=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
y = np.full(4, 2.0, np.float32)
assert np.array_equal(hvd.allreduce(y, op=hvd.Sum, name="after"), y * hvd.size())
print("collectives after it are right", flush=True)
hvd.shutdown()
