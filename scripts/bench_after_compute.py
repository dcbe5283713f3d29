"""One small all-reduce after a stretch of compute, as a training step calls it, against MPI's
call on the same MPI: what a rank pays when the runtime has been idle while it computed.

    mpiexec -n 2 python scripts/bench_after_compute.py [--compute-ms 0,1,10,100] [--reps 41]
        [--settle 60]

Each repetition: a barrier, `--compute-ms` of busy NumPy work on every rank (small matrix
products, so the core and its caches are busy as in a forward pass), then one timed call. The
columns (MPI_Allreduce, hvlite's named allreduce_ in place, its out-of-place allreduce) take
turns in a fresh random order each repetition, the same on every rank; a call's time is the
slowest rank's; the table shows medians and the ratio to MPI (<= 1.1 is the goal). On one host
the ranks share a monotonic clock, so a second pair of columns shows the time from the last
rank's start to the last rank's end: the call's own latency, without the ranks' skew in leaving
their compute (which the first pair charges to whoever finished first).

auto measures its algorithms on the job's own calls, and a call after compute is another regime
than the warm-up's calls back to back: in its first calls after compute auto finds its pick
running at another speed and measures the class again (calibrate.pyx), as a training job's
first steps do. So each block first runs `--settle` repetitions the same way, timed apart: the
last column shows their median for the slowest rank (the first steps), the table's columns the
calls after them (the steps of a settled job).
"""
import argparse
import sys
import time

import numpy as np

import hvlite as hvd


def busy(seconds, a, b, big):
    """Compute until `seconds` have passed: what a forward/backward pass leaves the core doing
    (small matrix products, or with `big` a stream through a large array, which also evicts the
    caches; with neither a sleep, which leaves the core idle)."""
    end = time.perf_counter() + seconds
    if a is None and big is None:
        time.sleep(seconds)
        return
    while time.perf_counter() < end:
        if big is not None:
            big += 1.0
        else:
            np.dot(a, b, out=a)
            a *= 1e-3


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--compute-ms", default="0,1,10,100")
    p.add_argument("--size", default="4K")
    p.add_argument("--reps", type=int, default=41)
    p.add_argument("--settle", type=int, default=60,
                   help="repetitions of each block run first, their median shown apart")
    p.add_argument("--compute", choices=("matmul", "stream", "sleep"), default="matmul",
                   help="what the compute is: small matrix products, a stream through 32 MiB, "
                        "or a sleep")
    args = p.parse_args()
    if args.reps < 1 or args.settle < 0:
        p.error("--reps must be >= 1 and --settle >= 0")
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from benchkit import human, parse_size

    hvd.init()
    rt = hvd._current()
    comm, MPI = rt.comm, rt.MPI
    x = np.ones(max(1, parse_size(args.size) // 4), np.float32)
    y = np.empty_like(x)
    a = np.ones((64, 64), np.float32)
    b = np.ones((64, 64), np.float32)
    big = np.zeros(8 << 20, np.float32) if args.compute == "stream" else None
    if args.compute != "matmul":
        a = None
    cols = [
        ("MPI_Allreduce", lambda: comm.Allreduce(x, y, op=MPI.SUM)),
        ("allreduce_ named", lambda: hvd.allreduce_(x, op=hvd.Sum, name="ac.in")),
        ("allreduce named", lambda: hvd.allreduce(x, op=hvd.Sum, name="ac.out")),
    ]
    for _ in range(50):                       # warm-up: names agreed, algorithms measured
        for _, fn in cols:
            fn()
    if hvd.rank() == 0:
        print(f"# one {human(x.nbytes)} call after {args.compute}, {hvd.size()} ranks: median of "
              f"{args.reps} calls after {args.settle} of each block: the slowest rank's time | "
              f"the last start to the last end | the first {args.settle} calls' slowest rank; "
              "ratios to MPI_Allreduce", flush=True)
    order = np.random.default_rng(args.reps)
    for ms in (float(s) for s in args.compute_ms.split(",")):
        n = args.settle + args.reps
        stamps = np.zeros((2, len(cols), n))      # when each call began and ended
        for rep in range(n):
            for j in order.permutation(len(cols)):
                comm.Barrier()
                busy(ms / 1e3, a, b, big)
                stamps[0, j, rep] = time.perf_counter()
                cols[j][1]()
                stamps[1, j, rep] = time.perf_counter()
        took = stamps[1] - stamps[0]
        slowest = np.empty_like(took)
        comm.Allreduce(took, slowest, op=MPI.MAX)
        last = np.empty_like(stamps)                         # the last rank's start and end
        comm.Allreduce(stamps, last, op=MPI.MAX)
        med = np.median(slowest[:, args.settle:], axis=1)
        after = np.median((last[1] - last[0])[:, args.settle:], axis=1)
        first = np.median(slowest[:, :args.settle], axis=1) if args.settle else None
        if hvd.rank() == 0:
            for j, (label, _) in enumerate(cols):
                print(f"{ms:6g} ms | {label:<18} | {med[j] * 1e6:7.1f} us "
                      f"{med[j] / med[0]:5.2f}x | "
                      f"{after[j] * 1e6:7.1f} us {after[j] / after[0]:5.2f}x" + (
                          "" if first is None else
                          f" | first {args.settle}: {first[j] * 1e6:7.1f} us "
                          f"{first[j] / first[0]:5.2f}x"), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
