"""What the torch layer costs: allreduce of a float32 CPU tensor through hvlite.torch against the
same allreduce of a NumPy array through hvlite, interleaved in one run.

    mpiexec -n 2 python scripts/bench_torch.py [--reps 50]

Reports the median time per call for each size and the ratio torch / NumPy, for the
out-of-place (`allreduce`) and in-place (`allreduce_`) forms, async then synchronize, and the
grouped forms (8 tensors of the size; NumPy's in-place group is its 8 async calls).
"""
import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hvlite as hv  # noqa: E402
import hvlite.torch as hvd  # noqa: E402

SIZES = [256, 16 * 1024, 1024 * 1024]          # float32 elements: 1 KB, 64 KB, 4 MB
GROUP = 8                                       # tensors in a grouped call


def timed(fn, reps):
    out = []
    for _ in range(reps):
        hv.barrier()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    rows = []
    for count in SIZES:
        t = torch.ones(count)
        a = np.ones(count, np.float32)
        ts, arrs = [torch.ones(count) for _ in range(GROUP)], [np.ones(count, np.float32)
                                                              for _ in range(GROUP)]
        cases = {"allreduce": (lambda: hvd.allreduce(t, name="t"), lambda: hv.allreduce(a, name="a")),
                 "allreduce_": (lambda: hvd.allreduce_(t, name="t_"),
                                lambda: hv.allreduce_(a, name="a_")),
                 "allreduce_async, synchronize": (
                     lambda: hvd.allreduce_async(t, name="ta").synchronize(),
                     lambda: hv.allreduce_async(a, name="aa").synchronize()),
                 f"grouped_allreduce of {GROUP}": (
                     lambda: hvd.grouped_allreduce(ts, name="tg"),
                     lambda: hv.grouped_allreduce(arrs, name="ag")),
                 f"grouped_allreduce_ of {GROUP}": (   # NumPy has no in-place group: its parts
                     lambda: hvd.grouped_allreduce_(ts, name="tg_"),
                     lambda: [h.synchronize() for h in [hv.allreduce_async_(
                         x, name=f"ag_.{i}") for i, x in enumerate(arrs)]])}
        for form, (ft, fa) in cases.items():
            tt, ta = [], []
            for _ in range(2):                 # interleave, so drift hits both alike
                tt += timed(ft, args.reps // 2)
                ta += timed(fa, args.reps // 2)
            rows.append((form, count * 4, np.median(tt), np.median(ta)))
    times = hv.allgather_object(rows)
    if hvd.rank() == 0:
        print(f"{hvd.size()} ranks, {args.reps} calls each, medians (rank 0)")
        print("| form | bytes a tensor | hvlite.torch | hvlite (NumPy) | torch / NumPy |")
        print("|---|---|---|---|---|")
        for form, nbytes, tt, ta in times[0]:
            print(f"| {form} | {nbytes} | {tt * 1e6:.0f} us | {ta * 1e6:.0f} us | {tt / ta:.2f}x |")


if __name__ == "__main__":
    main()
