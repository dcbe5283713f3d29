"""Rank side: how much CPU a rank burns while its all-reduce waits for data from another host.

`python mpi_waits.py ALGORITHM MIB ROUNDS`: ROUNDS all-reduces of MIB MiB, each checked against
NumPy; every rank measures its process's CPU time (all threads) against the wall time of the
calls, and rank 0 prints `waits ALGORITHM <rank>=<cpu / wall> ...`. Over a slow link a wait that
naps costs a small part of the wall time; one that yields costs all of it (a core taken from the
rank's compute)."""
import sys
import time

import numpy as np

import hvlite as hvd

algorithm, mib, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
hvd.init()
count = int(mib * (1 << 20)) // 4
x = np.full(count, hvd.rank() + 1, np.float32)
hvd.allreduce(x, op=hvd.Sum, algorithm=algorithm, name="warm")
hvd.barrier()
cpu, wall = time.process_time(), time.perf_counter()
for i in range(rounds):
    y = hvd.allreduce(x, op=hvd.Sum, algorithm=algorithm, name=f"r{i}")
    assert np.array_equal(y, np.full(count, hvd.size() * (hvd.size() + 1) / 2, np.float32)), y[:4]
share = (time.process_time() - cpu) / (time.perf_counter() - wall)
shares = hvd.allgather_object(share)
if hvd.rank() == 0:
    print(f"waits {algorithm} " + " ".join(f"{r}={s:.3f}" for r, s in enumerate(shares)), flush=True)
hvd.shutdown()
