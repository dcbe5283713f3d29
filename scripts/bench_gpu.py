"""GPU all-reduce benchmark: hvlite on device arrays vs the device<->host copy bandwidth and the
host all-reduce of the same bytes (the staged path's parts), and (--nccl-reference, one process)
torch's NCCL all-reduce. Medians of --reps runs in --rounds interleaved rounds; prints a table.

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
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls of each size first")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median of them)")
    ap.add_argument("--unique-names", dest="same_names", action="store_false",
                    help="a new name every call (each misses the response cache)")
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
        print(f"| MiB | hvlite {path} all-reduce (ms) | D2H+H2D copy (ms) | host all-reduce, "
              "same bytes (ms) | ratio to copy + host |")
    for mib in a.sizes:
        n = int(mib * (1 << 20)) // 4
        x = cupy.ones(n, cupy.float32)
        host = cupy.cuda.alloc_pinned_memory(n * 4)
        h = np.frombuffer(host, np.float32, n)
        k = [0]

        def ar():       # one name a size, as a training loop's tensors keep theirs
            k[0] += 1
            hvd.allreduce(x, op=hvd.Sum, name=f"bench.{mib}" if a.same_names
                          else f"bench.{mib}.{k[0]}")

        def copies():
            x.get(out=h)
            x.set(h)

        def host_ar():
            hvd.allreduce_(h, op=hvd.Sum, name=f"bench.host.{mib}")
        for _ in range(a.warmup):       # auto's trials of a new size are not what is timed
            ar()
            host_ar()
        sync()
        t_ar, t_cp, t_h = [], [], []
        for _ in range(a.rounds):       # interleaved, so that drift hits all three alike
            t_ar.append(median_time(ar, a.reps, sync))
            t_cp.append(median_time(copies, a.reps, sync))
            t_h.append(median_time(host_ar, a.reps, lambda: None))
        t_ar, t_cp, t_h = (statistics.median(v) for v in (t_ar, t_cp, t_h))
        if hvd.rank() == 0:
            print(f"| {mib:g} | {t_ar * 1e3:.3f} | {t_cp * 1e3:.3f} | {t_h * 1e3:.3f} | "
                  f"{t_ar / (t_cp + t_h):.2f} |")
    hvd.shutdown()


if __name__ == "__main__":
    main()
