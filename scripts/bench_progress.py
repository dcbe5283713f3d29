"""How far an async all-reduce gets while every rank computes: what overlap rests on.

    mpiexec -n 2 python scripts/bench_progress.py [--sizes 4K,256K] [--compute matmul,sleep]
    hvliterun -np 4 -H h1:2,h2:2 python scripts/bench_progress.py     # across (emulated) hosts

A training step submits each gradient's all-reduce as backward produces it and computes on; the
communication is hidden only if it moves while the compute runs. Each repetition: a barrier,
then one all-reduce submitted (hvlite's named allreduce_async_, or MPI_Iallreduce), then
`--compute-ms` of compute in slices of `--poll-ms`, looking after each slice whether the call
has completed (hvlite's poll; MPI_Test for MPI's, which moves only inside MPI calls), then the
wait. The two calls take turns in a random order, the same on every rank. The figure is when
the call was first seen complete, the median over repetitions of the slowest rank's; where it
was not seen complete during the compute, the time the wait returned ("during" counts the
repetitions where every rank saw it complete during the compute). A figure near --poll-ms is
the first look. Compute is small matrix products on one thread (`matmul`), or a sleep, which
leaves the cores free: the gap between the two is what the compute's use of the cores costs
the communication.
"""
import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import hvlite as hvd  # noqa: E402


def compute(seconds, a, kind):
    """One slice of compute: matrix products until `seconds` have passed, or a sleep."""
    if kind == "sleep":
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        np.dot(a, a, out=a)
        a *= 1e-3


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4K,256K", help="comma-separated sizes of the all-reduce")
    p.add_argument("--compute", default="matmul,sleep", help="comma-separated: matmul, sleep")
    p.add_argument("--compute-ms", type=float, default=30.0, help="compute after each submit")
    p.add_argument("--poll-ms", type=float, default=0.5, help="compute between two looks")
    p.add_argument("--reps", type=int, default=21, help="repetitions (medians over them)")
    p.add_argument("--algorithm", default="auto", help="hvlite's algorithm= for its call")
    args = p.parse_args()
    kinds = args.compute.split(",")
    for kind in kinds:
        if kind not in ("matmul", "sleep"):
            p.error(f"--compute: {kind!r} is neither matmul nor sleep")
    if args.reps < 1 or args.poll_ms <= 0 or args.compute_ms < args.poll_ms:
        p.error("--reps must be >= 1 and 0 < --poll-ms <= --compute-ms")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchkit import human, parse_size

    hvd.init()
    rt = hvd._current()
    comm, MPI = rt.comm, rt.MPI
    a = np.ones((64, 64))
    order = np.random.default_rng(args.reps)
    if hvd.rank() == 0:
        print(f"# an all-reduce submitted, then {args.compute_ms:g} ms of compute polled every "
              f"{args.poll_ms:g} ms; {hvd.size()} ranks; median of {args.reps}: when the slowest "
              "rank first saw it complete", flush=True)
        print("size     | compute | call                    | complete after | during", flush=True)
    for size in args.sizes.split(","):
        x = np.ones(max(1, parse_size(size) // 4), np.float32)
        y = np.empty_like(x)
        for _ in range(60):                     # names agreed, auto's trials over
            x.fill(1)
            hvd.allreduce_(x, op=hvd.Sum, name="progress", algorithm=args.algorithm)
            comm.Allreduce(x, y, op=MPI.SUM)

        def ours():
            h = hvd.allreduce_async_(x, op=hvd.Sum, name="progress", algorithm=args.algorithm)
            return lambda: hvd.poll(h), lambda: hvd.synchronize(h)

        def theirs():
            req = comm.Iallreduce(x, y, op=MPI.SUM)
            return req.Test, req.Wait

        cols = [("hvlite allreduce_async_", ours), ("MPI_Iallreduce", theirs)]
        for kind in kinds:
            seen = np.zeros((len(cols), args.reps))
            during = np.zeros((len(cols), args.reps))
            for rep in range(args.reps):
                for j in order.permutation(len(cols)):
                    start = cols[j][1]
                    x.fill(1)                           # a sum of ones stays finite
                    comm.Barrier()
                    t0 = time.perf_counter()
                    done, wait = start()
                    first = None
                    while time.perf_counter() - t0 < args.compute_ms / 1e3:
                        compute(args.poll_ms / 1e3, a, kind)
                        if first is None and done():
                            first = time.perf_counter() - t0
                    wait()
                    seen[j, rep] = first if first is not None else time.perf_counter() - t0
                    during[j, rep] = first is not None
            slowest = np.empty_like(seen)
            comm.Allreduce(seen, slowest, op=MPI.MAX)
            everywhere = np.empty_like(during)
            comm.Allreduce(during, everywhere, op=MPI.MIN)
            if hvd.rank() == 0:
                for j, (label, _) in enumerate(cols):
                    print(f"{human(x.nbytes):<8} | {kind:<7} | {label:<23} | "
                          f"{np.median(slowest[j]) * 1e3:6.2f} ms | "
                          f"{int(everywhere[j].sum())}/{args.reps}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
