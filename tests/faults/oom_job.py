"""One rank runs out of memory inside a round (tests/faults/test_faults.py): its address space
is capped (RLIMIT_AS) just above what it uses, then argv[1] says where hvlite's own allocation
fails on it alone: 'joined' (rank 1 has joined; rank 0's 256 MiB all-reduce needs a buffer of
the op's identity there) or 'fused' (200 all-reduces of 128 KiB fused into one 25 MiB buffer,
by ring; rank 1 also refuses fused buffers over 64 KiB, so the batch a round happens to take
fails however small). argv[2]: an empty directory for the ranks' "spoke" marks. Every rank
must raise RankFailedError naming rank 1 and the size; none may hang."""
import os
import resource
import sys
import time

import numpy as np

import hvlite as hvd

case = sys.argv[1]
hvd.init()
rank = hvd.rank()


def cap(margin):
    """Only `margin` bytes of address space beyond what this process maps now."""
    with open("/proc/self/status") as f:
        vm = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + margin, resource.RLIM_INFINITY))


try:
    if case == "joined":
        x = np.ones(64 << 20, np.float32)           # 256 MiB
        hvd.barrier()
        if rank == 1:
            cap(64 << 20)
            hvd.join()
        else:
            hvd.allreduce_(x, op=hvd.Sum, algorithm="ring", name="big")
            hvd.join()
    else:
        xs = [np.ones(32 << 10, np.float32) for _ in range(200)]      # 128 KiB each, 25 MiB
        hvd.barrier()
        if rank == 1:
            cap(8 << 20)
            # and, since a round's batch is only what every rank had submitted when it began
            # (one round may take 3 calls on a busy machine), any fused batch fails
            from hvlite._core.execute.fusion import _test_alloc_limit
            _test_alloc_limit(64 << 10)
        hs = [hvd.allreduce_async_(x, op=hvd.Sum, algorithm="ring", name=f"g.{i}")
              for i, x in enumerate(xs)]
        for h in hs:
            h.synchronize()
    print(f"rank {rank}: no error", flush=True)
except hvd.RankFailedError as e:
    print(f"rank {rank}: RankFailedError: {e}", flush=True)
    # mpiexec ends the job at the first failed exit: every rank waits (10 s at most) until
    # all have spoken
    spoke = os.path.join(sys.argv[2], f"spoke.{rank}")
    open(spoke, "w").close()
    deadline = time.time() + 10
    while time.time() < deadline and len(os.listdir(sys.argv[2])) < hvd.size():
        time.sleep(0.05)
    sys.exit(1)
