"""Rank side: the bytes each host sends over its link during all-reduces of one algorithm, and
the CPU each rank spends while they wait on it.

`python mpi_traffic.py ALGORITHM MIB ROUNDS`: local rank 0 of each host reads its interface's
transmit counter (/proc/net/dev, which shows the rank's own network namespace) before and after
ROUNDS all-reduces of MIB MiB, each checked against NumPy, and rank 0 prints one line
`traffic ALGORITHM <host>=<bytes sent per byte reduced> ...`. Every rank also measures its
process's CPU time (all threads) against the calls' wall time, and rank 0 prints `waits
ALGORITHM <rank>=<cpu / wall> ...`: over a slow link a wait that naps costs a small part of the
wall time, one that yields all of it (a core taken from the rank's compute). It also prints
`policy <rank>=<scheduling policy of the coordinator thread>`: a batch task on one node only."""
import os
import socket
import sys
import time

import numpy as np

import hvlite as hvd

DEVICE = os.environ.get("UCX_NET_DEVICES", "eth0").split(",")[0].split(":")[0]


def sent_bytes():
    for line in open("/proc/net/dev"):
        name, _, rest = line.partition(":")
        if name.strip() == DEVICE:
            return int(rest.split()[8])
    raise SystemExit(f"no interface {DEVICE} in /proc/net/dev")


algorithm, mib, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
hvd.init()
count = int(mib * (1 << 20)) // 4
x = np.full(count, hvd.rank() + 1, np.float32)
hvd.allreduce(x, op=hvd.Sum, algorithm=algorithm, name="warm")
hvd.barrier()
before = sent_bytes() if hvd.local_rank() == 0 else 0
cpu, wall = time.process_time(), time.perf_counter()
want = hvd.size() * (hvd.size() + 1) / 2
for i in range(rounds):
    y = hvd.allreduce(x, op=hvd.Sum, algorithm=algorithm, name=f"r{i}")
    assert np.array_equal(y, np.full(count, want, np.float32)), (y[:4], want)
share = (time.process_time() - cpu) / (time.perf_counter() - wall)
hvd.barrier()
after = sent_bytes() if hvd.local_rank() == 0 else 0
shares = hvd.allgather_object(share)
policy = os.sched_getscheduler(hvd._current().global_state.thread.native_id)
policies = hvd.allgather_object("batch" if policy == os.SCHED_BATCH else
                                "other" if policy == os.SCHED_OTHER else str(policy))
per_host = hvd.allgather_object((socket.gethostname(), hvd.local_rank(), after - before))
if hvd.rank() == 0:
    ratios = {h: b / (rounds * count * 4) for h, lr, b in per_host if lr == 0}
    print(f"traffic {algorithm} " + " ".join(f"{h}={r:.3f}" for h, r in sorted(ratios.items())),
          flush=True)
    print(f"waits {algorithm} " + " ".join(f"{r}={v:.3f}" for r, v in enumerate(shares)), flush=True)
    print("policy " + " ".join(f"{r}={p}" for r, p in enumerate(policies)), flush=True)
hvd.shutdown()
