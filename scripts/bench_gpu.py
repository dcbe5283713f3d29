"""GPU all-reduce benchmark: hvlite on device arrays vs the device<->host copy bandwidth, and
(--nccl-reference, one process) torch's NCCL all-reduce. Medians of --reps runs; prints a table.

    mpiexec -n 2 python scripts/bench_gpu.py --sizes 1 16 64 --aware 0
"""
import argparse
import statistics
import time

import numpy as np


def median_time(fn, reps, sync):
    fn()
    sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", type=float, default=[1, 16, 64])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--aware", default="0")
    ap.add_argument("--nccl-reference", action="store_true")
    a = ap.parse_args()
    import cupy
    sync = cupy.cuda.Device().synchronize    # benchmark timing only, not the runtime's path
    if a.nccl_reference:
        import os
        import torch
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=0, world_size=1)
        print("| MiB | torch NCCL all-reduce, 1 process (ms) |")
        for mib in a.sizes:
            t = torch.ones(int(mib * (1 << 20)) // 4, device="cuda")
            ms = median_time(lambda: dist.all_reduce(t), a.reps, torch.cuda.synchronize) * 1e3
            print(f"| {mib:g} | {ms:.3f} |")
        return
    import hvlite as hvd
    hvd.init()
    path = "CUDA-aware" if a.aware == "1" else "staged"
    if hvd.rank() == 0:
        print(f"| MiB | hvlite {path} all-reduce (ms) | D2H+H2D copy (ms) | ratio |")
    for mib in a.sizes:
        n = int(mib * (1 << 20)) // 4
        x = cupy.ones(n, cupy.float32)
        host = cupy.cuda.alloc_pinned_memory(n * 4)
        h = np.frombuffer(host, np.float32, n)
        k = [0]

        def ar():
            k[0] += 1
            hvd.allreduce(x, op=hvd.Sum, name=f"bench.{mib}.{k[0]}")

        def copies():
            x.get(out=h)
            x.set(h)
        t_ar = median_time(ar, a.reps, sync)
        t_cp = median_time(copies, a.reps, sync)
        if hvd.rank() == 0:
            print(f"| {mib:g} | {t_ar * 1e3:.3f} | {t_cp * 1e3:.3f} | {t_ar / t_cp:.2f} |")
    hvd.shutdown()


if __name__ == "__main__":
    main()
