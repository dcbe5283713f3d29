"""MPI_Allreduce alone, without hvlite, at a chosen thread level: the reference for MPICH's own
tuned shared-memory all-reduce (which it uses only at MPI_THREAD_SINGLE), e.g.

    MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM=release_gather MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD=0 \\
    MPIR_CVAR_REDUCE_INTRANODE_BUFFER_TOTAL_SIZE=4194304 MPIR_CVAR_BCAST_INTRANODE_BUFFER_TOTAL_SIZE=4194304 \\
    MPIR_CVAR_COLLECTIVE_FALLBACK=error \\
    mpiexec -n 2 python scripts/bench_mpi_reference.py --thread-level single --sizes 64M,256M

Same method as bench_allreduce.py: persistent float32 buffer, slowest rank per repetition, median.
"""
import argparse
import time

import mpi4py


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--thread-level", default="single",
                   choices=["single", "funneled", "serialized", "multiple"])
    p.add_argument("--sizes", default="64M,256M")
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timing per size")
    args = p.parse_args()
    mpi4py.rc.thread_level = args.thread_level
    from mpi4py import MPI
    import numpy as np
    from bench_allreduce import human, parse_size
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    for nbytes in (parse_size(s) for s in args.sizes.split(",")):
        buf = np.zeros(max(1, nbytes // 4), np.float32)

        def once():
            comm.Barrier()
            t0 = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            return time.perf_counter() - t0
        once()
        est = comm.allreduce(once(), op=MPI.MAX)
        reps = int(max(5, min(300, args.budget / max(est, 1e-7))))
        times = np.array([once() for _ in range(reps)])
        slowest = np.empty_like(times)
        comm.Allreduce(times, slowest, op=MPI.MAX)
        t = float(np.median(slowest))
        if comm.Get_rank() == 0:
            print(f"{human(buf.nbytes):>9} | MPI_Allreduce at {args.thread_level}: {t * 1e3:8.2f} ms, "
                  f"bus bandwidth {2 * (n - 1) / n * buf.nbytes / t / 1e9:.2f} GB/s ({reps} reps)",
                  flush=True)


if __name__ == "__main__":
    main()
