"""Small synchronous collectives through the public calls against their MPI counterparts, in one
run: where latency, not bandwidth, decides.

    mpiexec -n 2 python scripts/bench_small.py [--sizes 4K,64K] [--calls 200] [--reps 15]

Each cell times a block of `--calls` back-to-back calls (one barrier before the block, so the
barrier is not in the per-call time), as a training loop makes them; blocks of every column run
in a fresh random order each repetition (the same on every rank); a block's time is the slowest
rank's; the table shows the median per-call time and its ratio to the MPI call of the same kind
(>1: slower than MPI). float32 buffers, Sum for all-reduce.
"""
import argparse
import sys
import time

import numpy as np

import hvlite as hvd


def columns(comm, MPI, nbytes, n):
    x = np.ones(max(1, nbytes // 4), np.float32)
    row = np.ones(max(1, nbytes // 4 // n), np.float32)
    gathered = np.empty(row.size * n, np.float32)
    block = np.empty(row.size, np.float32)          # this rank's block of x, reduced
    parts = np.ones(row.size * n, np.float32)       # row.size elements to every rank
    received = np.empty_like(parts)
    return {
        # kind: [(label, call), ...]; the first of each kind is the MPI reference
        "allreduce": [
            ("MPI_Allreduce", lambda: comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)),
            ("allreduce_ named", lambda: hvd.allreduce_(x, op=hvd.Sum, name="s.ar")),
            ("allreduce_ unnamed", lambda: hvd.allreduce_(x, op=hvd.Sum)),
            ("allreduce named", lambda: hvd.allreduce(x, op=hvd.Sum, name="s.oop")),
            ("async+synchronize", lambda: hvd.allreduce_async_(x, op=hvd.Sum, name="s.as").synchronize()),
        ],
        "broadcast": [
            ("MPI_Bcast", lambda: comm.Bcast(x, root=0)),
            ("broadcast_ named", lambda: hvd.broadcast_(x, 0, name="s.bc")),
            ("broadcast_ unnamed", lambda: hvd.broadcast_(x, 0)),
        ],
        "allgather": [
            ("MPI_Allgather", lambda: comm.Allgather(row, gathered)),
            ("allgather named", lambda: hvd.allgather(row, name="s.ag")),
            ("allgather unnamed", lambda: hvd.allgather(row)),
        ],
        "reducescatter": [
            ("MPI_Reduce_scatter_block", lambda: comm.Reduce_scatter_block(parts, block, op=MPI.SUM)),
            ("reducescatter named", lambda: hvd.reducescatter(parts, op=hvd.Sum, name="s.rs")),
        ],
        "alltoall": [
            ("MPI_Alltoall", lambda: comm.Alltoall(parts, received)),
            ("alltoall named", lambda: hvd.alltoall(parts, name="s.aa")),
        ],
        "barrier": [
            ("MPI_Barrier", lambda: comm.Barrier()),
            ("barrier", lambda: hvd.barrier()),
        ],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4K,64K")
    p.add_argument("--calls", type=int, default=200, help="calls per timed block")
    p.add_argument("--reps", type=int, default=15, help="blocks per column")
    args = p.parse_args()
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_allreduce import human, parse_size

    hvd.init()
    rt = hvd._current()
    comm, MPI, n = rt.comm, rt.MPI, hvd.size()
    if hvd.rank() == 0:
        print(f"# small synchronous collectives, {n} ranks, {hvd.mpi_thread_level()}: median "
              f"per-call time of blocks of {args.calls} calls, ratio to the MPI call (<= 1 is "
              "as fast as MPI)", flush=True)
    for nbytes in (parse_size(s) for s in args.sizes.split(",")):
        kinds = columns(comm, MPI, nbytes, n)
        flat = [(kind, label, fn) for kind, cols in kinds.items() for label, fn in cols]
        for _, _, fn in flat:         # warm-up: fill the response cache (60 automatic names)
            for _ in range(80):
                fn()
        times = np.zeros((len(flat), args.reps))
        order = np.random.default_rng(args.reps)
        for rep in range(args.reps):
            for j in order.permutation(len(flat)):
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    flat[j][2]()
                times[j, rep] = (time.perf_counter() - t0) / args.calls
        slowest = np.empty_like(times)
        comm.Allreduce(times, slowest, op=MPI.MAX)
        med = np.median(slowest, axis=1)
        if hvd.rank() == 0:
            ref = {}
            for j, (kind, label, _) in enumerate(flat):
                ref.setdefault(kind, med[j])
                print(f"{human(nbytes):>8} | {kind:<13} | {label:<24} | {med[j] * 1e6:8.1f} us | "
                      f"{med[j] / ref[kind]:5.2f}x MPI", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
