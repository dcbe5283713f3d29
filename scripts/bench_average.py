"""Average against Sum, in place and out of place, through the public calls, in one run: the
division is fused into the shared segment's last pass, so Average should cost what Sum costs.

    mpiexec -n 2 python scripts/bench_average.py [--sizes 64K,1M,16M] [--reps 15]

Each repetition runs the four forms in a fresh random order (the same on every rank); a call's
time is the slowest rank's; the table gives medians and the Average / Sum ratios (1.00: free).
float32, named calls (response-cache hits), auto's algorithm unless --algorithm names one.
"""
import argparse
import sys
import time

import numpy as np

import hvlite as hvd


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="64K,1M,16M")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--algorithm", default=None, help="algorithm= for every call (default: auto)")
    args = p.parse_args()
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_allreduce import human, parse_size
    hvd.init()
    rt = hvd._current()
    comm, MPI = rt.comm, rt.MPI
    rng = np.random.default_rng(3)
    rows, alg = [], args.algorithm
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        x = np.ones(size // 4, np.float32)
        forms = {
            "in place, Sum": lambda: hvd.allreduce_(x, op=hvd.Sum, name="avg.is", algorithm=alg),
            "in place, Average": lambda: hvd.allreduce_(x, op=hvd.Average, name="avg.ia", algorithm=alg),
            "out of place, Sum": lambda: hvd.allreduce(x, op=hvd.Sum, name="avg.os", algorithm=alg),
            "out of place, Average": lambda: hvd.allreduce(x, op=hvd.Average, name="avg.oa", algorithm=alg),
        }
        calls = max(1, int(2e6 // max(size, 4096)))       # about 2 MB of calls a block
        for f in forms.values():
            f()
        times = {f: [] for f in forms}
        for _ in range(args.reps):
            for f in rng.permutation(list(forms)):
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(calls):
                    forms[f]()
                times[f].append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX) / calls)
        rows.append((human(size), {f: float(np.median(v)) * 1e6 for f, v in times.items()}))
    if hvd.rank() == 0:
        print(f"# {hvd.size()} ranks; median us per call over {args.reps} repetitions")
        print("| size | in place Sum | in place Average | Average / Sum | out of place Sum "
              "| out of place Average | Average / Sum |")
        print("|---|---|---|---|---|---|---|")
        for label, m in rows:
            print(f"| {label} | {m['in place, Sum']:.1f} | {m['in place, Average']:.1f} | "
                  f"{m['in place, Average'] / m['in place, Sum']:.2f}x | "
                  f"{m['out of place, Sum']:.1f} | {m['out of place, Average']:.1f} | "
                  f"{m['out of place, Average'] / m['out of place, Sum']:.2f}x |")
    hvd.shutdown()


if __name__ == "__main__":
    main()
