"""How repeatable auto's inputs are: the cost model's measured figures and the calibrated picks,
over several init()/shutdown() cycles in one job.

    mpiexec -n 4 python scripts/bench_cost_model.py [--runs 5] [--sizes 4K,64K,1M,16M]

Each run re-measures the model at init() and, for each size, makes 20 auto all-reduces, the
first of which try the size class's candidates. Printed (rank 0): every figure per run with its spread
(max/min over the runs), then each size's pick and measured times per run, and whether the pick
held in every run. Where two candidates are within a few per cent of each other the pick may
change between runs; the table shows by how much it could matter (the slower pick's time over
the faster's in the same run).
"""
import argparse

import numpy as np

import hvlite as hvd
from bench_allreduce import human, parse_size

FIGURES = ("alpha_intra", "beta_intra", "alpha_inter", "beta_inter", "gamma", "alpha_shm", "beta_mem")


def one_run(sizes):
    hvd.init()
    coord = hvd._current().global_state.coordinator
    model = dict(coord.cost_model())
    for n in sizes:         # enough calls for each class's trials (two per candidate)
        x = np.ones(n // 4, np.float32)
        for _ in range(20):
            hvd.allreduce_(x, op=hvd.Sum, name=f"cm.{n}")
    table = coord.calibration()
    nodes = hvd.cross_size()
    hvd.shutdown()
    return model, table, nodes


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--sizes", default="4K,64K,1M,16M")
    args = p.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    runs = []
    for k in range(args.runs):
        runs.append(one_run(sizes))
        from mpi4py import MPI
        if MPI.COMM_WORLD.Get_rank() == 0:
            print(f"# run {k + 1}/{args.runs} done", flush=True)
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_rank() != 0:
        return
    n = MPI.COMM_WORLD.Get_size()
    print(f"# cost model over {args.runs} init()s, {n} ranks, {runs[0][2]} node(s)")
    print(f"{'figure':<12} | " + " | ".join(f"run {k + 1:>2}" for k in range(args.runs)) + " | max/min")
    for f in FIGURES:
        vals = [r[0][f] for r in runs]
        spread = max(vals) / min(vals) if min(vals) > 0 else float("inf")
        print(f"{f:<12} | " + " | ".join(f"{v:.3g}".rjust(6) for v in vals) + f" | {spread:.2f}")
    print("# calibrated picks: size | pick per run (its time) | same pick every run | "
          "worst cost of a differing pick")
    for n_bytes in sizes:
        cls = 1 << max(10, min(24, n_bytes.bit_length() - 1))
        picks, cells, cost = [], [], 1.0
        for model, table, _ in runs:
            e = table.get(cls)
            if e is None:
                cells.append("-")
                continue
            picks.append(e["pick"])
            t = e["seconds"].get(e["pick"])
            cells.append(f"{e['pick']} ({t * 1e6:.0f} us)" if t else e["pick"])
        for model, table, _ in runs:     # a pick from another run, timed in this one
            e = table.get(cls)
            if e is None or not e["seconds"]:
                continue
            best = min(e["seconds"].values())
            for other in set(picks):
                if other in e["seconds"]:
                    cost = max(cost, e["seconds"][other] / best)
        print(f"{human(n_bytes):>8} | " + ", ".join(cells) + f" | {len(set(picks)) <= 1} | {cost:.2f}")


if __name__ == "__main__":
    main()
