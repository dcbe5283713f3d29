"""The smallest hvlite job: sum and average NumPy arrays across ranks, then time each algorithm.

    mpiexec -n 2 python examples/allreduce_demo.py
"""
import time

import numpy as np

import hvlite as hvd


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    grad = np.arange(6, dtype=np.float32) * (rank + 1)
    total = hvd.allreduce(grad, op=hvd.Sum)
    mean = hvd.allreduce(grad)                       # Average is the default, as in Horovod
    biggest = hvd.allreduce(np.array([rank * 10]), op=hvd.Max)
    for r in range(size):
        if r == rank:
            print(f"rank {rank}/{size}: grad={grad.tolist()} sum={total.tolist()} "
                  f"mean={mean.tolist()} max={biggest.tolist()}", flush=True)
        hvd._current().comm.Barrier()

    if rank == 0:
        print(f"\nthread level {hvd.mpi_thread_level()}; median of 20 in-place float32 sums:")
        print(f"{'size':>8} " + "".join(f"{a:>14}" for a in ("mpi", "ring", "rhd", "tree", "auto")))
    for nbytes in (4 << 10, 256 << 10, 4 << 20):
        x = np.zeros(nbytes // 4, np.float32)
        cells = []
        for algo in ("mpi", "ring", "rhd", "tree", "auto"):
            hvd.allreduce_(x, op=hvd.Sum, algorithm=algo)          # warm-up
            times = []
            for _ in range(20):
                hvd._current().comm.Barrier()
                t0 = time.perf_counter()
                hvd.allreduce_(x, op=hvd.Sum, algorithm=algo)
                times.append(time.perf_counter() - t0)
            worst = hvd._current().comm.allreduce(float(np.median(times)), op=hvd._current().MPI.MAX)
            cells.append(f"{worst * 1e6:11.1f} us")
        if rank == 0:
            print(f"{nbytes >> 10:>5} KiB " + "".join(f"{c:>14}" for c in cells))
    if rank == 0:
        print("\n(full table: mpiexec -n 2 python scripts/bench_allreduce.py)")
    hvd.shutdown()


if __name__ == "__main__":
    main()
