"""A blocked call stays interruptible (tests/test_runtime.py): rank 0 waits in an all-reduce that
rank 1 submits only once rank 0 has left it (argv[1]: a file rank 0 writes then). So the wait
can end only through the signals: a SIGUSR1 handler runs within it, and SIGINT raises
KeyboardInterrupt in the caller (without them the launch hangs until its timeout). Rank 0 then
shuts down and leaves, and rank 1's call fails with an error naming it instead of waiting for it."""
import os
import signal
import sys
import threading
import time

import numpy as np

import hvlite as hvd

hvd.init()
rank = hvd.rank()
hvd.barrier()
if rank == 0:
    ran = []
    signal.signal(signal.SIGUSR1, lambda *a: ran.append(time.monotonic()))
    t0 = time.monotonic()
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    threading.Timer(0.8, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        hvd.allreduce(np.ones(4), name="slow")
        print("rank 0: the call returned", flush=True)
    except KeyboardInterrupt:
        print(f"rank 0: handler after {ran[0] - t0:.2f} s, KeyboardInterrupt after "
              f"{time.monotonic() - t0:.2f} s", flush=True)
    # shut down before rank 1 calls: its call then meets the shutdown, not the request rank 0
    # left behind (with the file first, a call quick to follow ran with it before the stop)
    hvd.shutdown()
    open(sys.argv[1], "w").close()
    sys.exit(3)
else:
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        hvd.allreduce(np.ones(4), name="slow")
        print(f"rank {rank}: the call returned", flush=True)
    except hvd.HvliteError as e:
        print(f"rank {rank}: {type(e).__name__}: {e}", flush=True)
    sys.exit(4)
