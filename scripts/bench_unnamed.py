"""Loops of unnamed calls against the same loops with names and against MPI_Allreduce, in one run:
an unnamed call's name is its place in the set's sequence of unnamed calls (`<k mod 60>`), and
the response cache must hit whatever the count of calls a step.

    mpiexec -n 2 python scripts/bench_unnamed.py [--calls 6,7,8] [--steps 200] [--reps 9]

A step is p synchronous in-place all-reduces (`allreduce_(a, op=Sum)`) on float32 arrays of
1..p KiB, as a NumPy training loop makes them. Each cell times --steps steps after one warm-up
block of lcm(p, 60) calls (every variant of every name agreed once); blocks of the three forms
run in a fresh random order each repetition, the same on every rank; a block's time is the
slowest rank's. The table gives the median time per call and the unnamed / named and unnamed /
MPI ratios (>1: slower).
"""
import argparse
import math
import time

import numpy as np

import hvlite as hvd


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", default="6,7,8", help="unnamed calls a step, comma-separated")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--reps", type=int, default=9)
    args = p.parse_args()
    hvd.init()
    rt = hvd._current()
    comm, MPI = rt.comm, rt.MPI
    rng = np.random.default_rng(7)
    rows = []
    for count in [int(c) for c in args.calls.split(",")]:
        arrays = [np.ones(256 * (k + 1), np.float32) for k in range(count)]
        forms = {
            "MPI_Allreduce": lambda: [comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM) for a in arrays],
            "named": lambda: [hvd.allreduce_(a, op=hvd.Sum, name=f"u.{k}")
                              for k, a in enumerate(arrays)],
            "unnamed": lambda: [hvd.allreduce_(a, op=hvd.Sum) for a in arrays],
        }
        for _ in range(math.lcm(count, 60) // count + 1):      # every variant agreed once
            forms["named"]()
            forms["unnamed"]()
        times = {f: [] for f in forms}
        for _ in range(args.reps):
            for f in rng.permutation(list(forms)):
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    forms[f]()
                took = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                times[f].append(took / (args.steps * count))
        med = {f: float(np.median(v)) * 1e6 for f, v in times.items()}
        rows.append((count, med))
    if hvd.rank() == 0:
        print(f"# {hvd.size()} ranks; median us per call over {args.reps} blocks of "
              f"{args.steps} steps")
        print("| calls a step | MPI_Allreduce | named | unnamed | unnamed / named | unnamed / MPI |")
        print("|---|---|---|---|---|---|")
        for count, m in rows:
            print(f"| {count} | {m['MPI_Allreduce']:.2f} | {m['named']:.2f} | {m['unnamed']:.2f} "
                  f"| {m['unnamed'] / m['named']:.2f}x | {m['unnamed'] / m['MPI_Allreduce']:.2f}x |")
    hvd.shutdown()


if __name__ == "__main__":
    main()
