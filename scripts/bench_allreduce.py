"""All-reduce benchmark of the public calls against MPI's own MPI_Allreduce, in one run.

    mpiexec -n 2 python scripts/bench_allreduce.py [--sizes 4K,1M,...] [--csv out.csv] [--png out.png]

What users call is what is timed: `hvd.allreduce_(x, op=Sum, name=...)` (named: a response-cache
hit after the first call), the same unnamed, the out-of-place `hvd.allreduce`, and
`hvd.allreduce_async_` then `synchronize()`, all left to `auto`; then `hvd.allreduce_` with each
algorithm forced (`algorithm=`), so auto's pick can be checked against the best in the same run.
`engine` (a labelled extra) calls the algorithms' dispatcher directly, with no coordinator in
front: no public call goes that way.

Each size gets one persistent float32 buffer (buffers and scratch persist across calls, as in
training). Each repetition runs every column in a fresh random order (the same on every rank),
so drift and ordering effects on a noisy machine hit them alike; a repetition's time is the
slowest rank's, and the table shows medians. The reference is MPI_Allreduce in place on the same
buffer, at the same thread level, called through mpi4py. Bus bandwidth = 2(N-1)/N * bytes / time.
"""
import argparse
import sys

import numpy as np

import hvlite as hvd
from hvlite._core.codes import ALGORITHMS
from benchkit import human, parse_size, pyplot, shuffled_medians, write_csv  # noqa: F401 (others import the first two from here)

PUBLIC = ("named", "unnamed", "out_of_place", "async")


def calls(rt, buf, algos):
    """column -> a function making one call on `buf`."""
    comm, MPI = rt.comm, rt.MPI
    fns = {
        "mpi_ref": lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
        "named": lambda: hvd.allreduce_(buf, op=hvd.Sum, name="bench.named"),
        "unnamed": lambda: hvd.allreduce_(buf, op=hvd.Sum),
        "out_of_place": lambda: hvd.allreduce(buf, op=hvd.Sum, name="bench.oop"),
        "async": lambda: hvd.allreduce_async_(buf, op=hvd.Sum, name="bench.async").synchronize(),
        "engine": lambda: rt.engine.allreduce(buf, 2, 0, ALGORITHMS.code("auto"), False),
    }
    for a in algos:
        fns[a] = (lambda a=a: hvd.allreduce_(buf, op=hvd.Sum, algorithm=a, name=f"bench.{a}"))
    return fns


AUTO_COLUMNS = ("named", "unnamed", "out_of_place", "async", "engine")


def measure(rt, fns, budget_s, max_reps):
    """Median seconds per call for each column (slowest rank per repetition)."""
    def warm(once):
        for c in fns:       # warm-up: page in, fill the response cache, settle MPI's buffers
            once(c)
            once(c)
        # auto tries its candidates on a size's first calls (tuning/calibrate.pyx): time it settled
        for _ in range(16):
            for c in AUTO_COLUMNS:
                if c in fns:
                    once(c)
    return shuffled_medians(rt.comm, rt.MPI.MAX, fns, warm, budget_s, max_reps)


def auto_pick(buf):
    """The algorithm a named public call left to auto ran on this buffer."""
    h = hvd.allreduce_async_(buf, op=hvd.Sum, name="bench.pick")
    h.wait()
    code = h._pending.algorithm_used
    h.synchronize()
    return ALGORITHMS[code] if 0 <= code < len(ALGORITHMS) else str(code)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4K,16K,64K,256K,1M,4M,16M,64M")
    p.add_argument("--algorithms", default=None,
                   help="comma list of algorithms forced through hvd.allreduce_ (default: every "
                        "one that applies)")
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timing per size")
    p.add_argument("--max-reps", type=int, default=300)
    p.add_argument("--csv", default=None)
    p.add_argument("--png", default=None)
    args = p.parse_args()

    hvd.init()
    rt = hvd._current()
    n, rank = hvd.size(), hvd.rank()
    if args.algorithms:
        algos = args.algorithms.split(",")
    else:
        algos = (["ring", "rhd", "rd", "tree"] + (["hierarchical"] if hvd.cross_size() > 1 else [])
                 + (["shm"] if rt.engine.shm_info()["available"] else []) + ["mpi"])
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows, summary = [], []
    cols = ["mpi_ref", *PUBLIC, *algos, "engine"]
    if rank == 0:
        print(f"# hvlite all-reduce benchmark: {n} ranks, float32 sum, {hvd.mpi_thread_level()}, "
              f"{hvd.cross_size()} node(s); public calls first, algorithms forced through "
              "hvd.allreduce_, engine = direct (extra)", flush=True)
        hdr = f"{'size':>9} | " + " | ".join(f"{c:>16}" for c in cols)
        print(hdr + "\n" + "-" * len(hdr), flush=True)
    for nbytes in sizes:
        buf = np.zeros(max(1, nbytes // 4), dtype=np.float32)
        med, reps = measure(rt, calls(rt, buf, algos), args.budget, args.max_reps)
        pick = auto_pick(buf)
        ref = med["mpi_ref"]
        best = min(algos, key=lambda a: med[a])
        if rank == 0:
            cells = []
            for c in cols:
                t = med[c]
                busbw = 2 * (n - 1) / n * buf.nbytes / t / 1e9 if n > 1 else float("nan")
                ratio = ref / t
                cells.append(f"{t * 1e6:8.1f}us {ratio:4.2f}x" if nbytes < (1 << 20)
                             else f"{busbw:6.2f}GB/s {ratio:4.2f}x")
                rows.append({"ranks": n, "bytes": buf.nbytes, "column": c, "median_s": t,
                             "busbw_GBps": busbw, "ratio_vs_mpi": ratio, "reps": reps,
                             "auto_pick": pick, "best_algorithm": best})
            print(f"{human(buf.nbytes):>9} | " + " | ".join(f"{c:>16}" for c in cells), flush=True)
            summary.append((buf.nbytes, pick, best, med["named"] / med[best]))
        del buf
    if rank == 0:
        print("# cells: median time (small) or bus bandwidth (>= 1 MiB), then speed relative to "
              "MPI_Allreduce (>1 is faster)")
        print("# auto's pick vs the best forced algorithm (named/best: auto's time over the best's):")
        for b, pick, best, r in summary:
            print(f"#   {human(b):>9}: auto ran {pick:<12} best {best:<12} named/best {r:.2f}")
        if args.csv:
            write_csv(args.csv, rows)
        if args.png:
            plot(rows, cols, n, hvd.mpi_thread_level(), args.png)
    hvd.shutdown()


def plot(rows, cols, n, level, path):
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    sizes = sorted({r["bytes"] for r in rows})
    for ax, wanted, title in ((axes[0], ("mpi_ref", *PUBLIC), "public calls (auto)"),
                              (axes[1], [c for c in cols if c not in PUBLIC], "algorithms forced")):
        for c in wanted:
            pts = [(r["bytes"], r["ratio_vs_mpi"]) for r in rows if r["column"] == c]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    linestyle="--" if c in ("mpi_ref", "engine") else "-",
                    label={"mpi_ref": "MPI_Allreduce", "engine": "engine direct (extra)"}.get(c, c))
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [human(b).replace(" ", "") for b in sizes], rotation=45)
        ax.set_xlabel("buffer size (bytes)")
        ax.set_ylabel("speed vs MPI_Allreduce (>1 faster)")
        ax.set_title(f"{title}, {n} ranks")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"hvd.allreduce_, float32 sum, {level}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"# wrote {path}")


if __name__ == "__main__":
    main()
