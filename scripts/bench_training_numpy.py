"""Training throughput: one process against hvlite with and without overlap, in one run.

    mpiexec -n 2 python scripts/bench_training_numpy.py [--steps 30]

Models (pure NumPy MLPs, synthetic data, per-rank batch fixed): "digits" (64-128-64-10, the
demo's) and "large" (1024-2048-2048-1024-10: 34 MB of float32 gradients per step). Schedules:
  one-process   rank 0 alone runs compute-only steps while the others wait (no communication)
  overlap       each layer's gradient goes to grad_ready as soon as it exists
  after         all gradients are handed in after the whole backward pass
Scaling efficiency = N x (steps/s of overlap) / (N x steps/s of one process) = the ratio of
per-step times (weak scaling: the global batch grows with N). The overlap figure comes from a
timeline of the overlap schedule.
"""
import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import hvlite as hvd  # noqa: E402
from hvlite.optim import SGD, DistributedOptimizer  # noqa: E402
from hvlite.timeline import report  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from train_digits import MLP  # noqa: E402

MODELS = {"digits": ((64, 128, 64, 10), 32), "large": ((1024, 2048, 2048, 1024, 10), 64)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    hvd.init()
    rt, rank, n = hvd._current(), hvd.rank(), hvd.size()
    comm, MPI = rt.comm, rt.MPI
    rows = []
    for label, (sizes, batch) in MODELS.items():
        model = MLP(sizes)
        rng = np.random.default_rng(rank)
        x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
        y = rng.integers(0, sizes[-1], batch)
        nbytes = sum(v.nbytes for v in model.params.values())

        def overlap_step(opt):
            with hvd.timeline.span("forward+backward"):      # free when no timeline is on
                model.loss_and_backward(x, y, opt.grad_ready)
            opt.step()                                      # marks its own update

        def after_step(opt):
            grads = {}
            model.loss_and_backward(x, y, grads.__setitem__)
            for name, g in grads.items():
                opt.grad_ready(name, g)
            opt.step()

        def local_step(opt):
            grads = {}
            model.loss_and_backward(x, y, grads.__setitem__)
            opt.step(model.params, grads)

        def timed(fn, opt, only_rank0=False):
            times = []
            for i in range(args.steps + 3):
                comm.Barrier()
                t0 = time.perf_counter()
                if not only_rank0 or rank == 0:
                    fn(opt)
                dt = time.perf_counter() - t0
                if i >= 3:
                    times.append(dt)
            return float(np.median(times))

        t_one = comm.bcast(timed(local_step, SGD(1e-4), only_rank0=True), root=0)
        opt = DistributedOptimizer(SGD(1e-4), model.params, prefix=f"{label}.")
        t_after = comm.allreduce(timed(after_step, opt), op=MPI.MAX)
        trace = os.path.join(tempfile.gettempdir(), f"hvlite_bench_training_numpy_{label}.json")
        hvd.start_timeline(trace)
        with_timeline = comm.allreduce(timed(overlap_step, opt), op=MPI.MAX)
        hvd.stop_timeline()
        t_overlap = comm.allreduce(timed(overlap_step, opt), op=MPI.MAX)
        hidden = None
        if rank == 0:
            comm_us, under = report.overlap(report.load(trace))[0]
            hidden = under / comm_us if comm_us else 0.0
        rows.append((label, nbytes, t_one, t_overlap, t_after, hidden, with_timeline))
    if rank == 0:
        print(f"# training steps/s, {n} ranks (per-rank batch fixed), median of {args.steps}; "
              f"{hvd.mpi_thread_level()}")
        print(f"{'model':>7} | {'grad MB':>7} | {'one process':>11} | {'overlap':>8} | {'after':>8} | "
              f"{'efficiency':>10} | {'overlap/after':>13} | {'hidden':>6}")
        for label, nbytes, t1, to, ta, hidden, _ in rows:
            print(f"{label:>7} | {nbytes / 1e6:7.1f} | {1 / t1:11.1f} | {1 / to:8.1f} | {1 / ta:8.1f} | "
                  f"{t1 / to:10.1%} | {ta / to:12.2f}x | {hidden:6.1%}")
        print("# efficiency: one-process step time / overlap step time (ideal 100%); hidden: share "
              "of communication under a compute span (timeline of the overlap schedule)")
    hvd.shutdown()


if __name__ == "__main__":
    main()
