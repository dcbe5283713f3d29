"""All-reduce benchmark: every hvlite algorithm against MPI's own MPI_Allreduce, in one run.

    mpiexec -n 2 python scripts/bench_allreduce.py [--sizes 4K,1M,...] [--csv out.csv] [--png out.png]

Each size gets one persistent float32 buffer (scratch and buffers persist across calls, as in
training). Each repetition runs the algorithms in a fresh random order, so drift and ordering
effects on a noisy machine hit them alike; a
rep's time is the slowest rank's, and the table shows medians. The reference is MPI_Allreduce in
place on the same buffer, at the same thread level, called through the same Python path.
Bus bandwidth = 2(N-1)/N * bytes / time. The "memcpy" column is the machine's ceiling: every
rank copies the buffer once (private to private) at the same moment, timed like the rest; an
all-reduce within a node touches each byte at least that often.
"""
import argparse
import csv
import sys
import time

import numpy as np

import hvlite as hvd
from hvlite._core.cost_model import ALGORITHMS

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(s):
    s = s.strip().upper().rstrip("IB")
    mult = UNITS.get(s[-1], 1)
    return int(float(s[:-1] if s[-1] in UNITS else s) * mult)


def human(n):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m:
            return f"{n / m:g} {unit}"
    return f"{n} B"


def measure(rt, buf, algos, budget_s, max_reps):
    """Median seconds per call for each algorithm (slowest rank per rep)."""
    comm = rt.comm
    engine = rt.engine
    codes = {a: ALGORITHMS.get(a) for a in algos}
    check = rt.settings.check_agreement

    dst = np.empty_like(buf) if "memcpy" in algos else None

    def once(a):
        comm.Barrier()
        t0 = time.perf_counter()
        if a == "memcpy":
            np.copyto(dst, buf)
        else:
            # "mpi" is the reference: no hvlite metadata check in front of it.
            engine.allreduce(buf, 2, 0, codes[a], check and a != "mpi")
        return time.perf_counter() - t0

    for a in algos:          # warm-up: page in the buffer, settle MPI's internal buffers
        once(a)
        once(a)
    est = comm.allreduce(max(once(a) for a in algos), op=rt.MPI.MAX)
    reps = int(max(5, min(max_reps, budget_s / max(est * len(algos), 1e-7))))
    times = np.zeros((len(algos), reps))
    order = np.random.default_rng(reps)          # same seed, so the same order on every rank
    for i in range(reps):
        for j in order.permutation(len(algos)):
            times[j, i] = once(algos[j])
    slowest = np.empty_like(times)
    comm.Allreduce(times, slowest, op=rt.MPI.MAX)
    return {a: float(np.median(slowest[j])) for j, a in enumerate(algos)}, reps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4K,16K,64K,256K,1M,4M,16M,64M,256M")
    p.add_argument("--algorithms", default=None,
                   help="comma list; default: every hvlite algorithm that applies, plus mpi")
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
        algos = (["mpi", "ring", "rhd", "rd", "tree"] + (["hierarchical"] if hvd.cross_size() > 1 else [])
                 + (["shm"] if rt.engine.shm_info()["available"] else []) + ["auto", "memcpy"])
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows = []
    if rank == 0:
        print(f"# hvlite all-reduce benchmark: {n} ranks, float32 sum, {hvd.mpi_thread_level()}, "
              f"{hvd.cross_size()} node(s)", flush=True)
        hdr = f"{'size':>9} | " + " | ".join(f"{a:>16}" for a in algos)
        print(hdr + "\n" + "-" * len(hdr), flush=True)
    for nbytes in sizes:
        buf = np.zeros(max(1, nbytes // 4), dtype=np.float32)
        med, reps = measure(rt, buf, algos, args.budget, args.max_reps)
        ref = med["mpi"] if "mpi" in med else None
        if rank == 0:
            cells = []
            for a in algos:
                t = med[a]
                busbw = 2 * (n - 1) / n * buf.nbytes / t / 1e9 if n > 1 else float("nan")
                ratio = ref / t if ref else float("nan")
                cells.append(f"{t * 1e6:8.1f}us {ratio:4.2f}x" if nbytes < (1 << 20)
                             else f"{busbw:6.2f}GB/s {ratio:4.2f}x")
                rows.append({"ranks": n, "bytes": buf.nbytes, "algorithm": a, "median_s": t,
                             "busbw_GBps": busbw, "ratio_vs_mpi": ratio, "reps": reps,
                             "chosen_by_auto": rt.engine.choose(buf.nbytes) == ALGORITHMS.get(a, -1)})
            print(f"{human(buf.nbytes):>9} | " + " | ".join(f"{c:>16}" for c in cells), flush=True)
        del buf
    if rank == 0:
        auto_pick = {r["bytes"]: r["algorithm"] for r in rows if r["chosen_by_auto"]}
        print("# cells: median time (small) or bus bandwidth (>= 1 MiB), then speed relative to "
              "MPI_Allreduce (>1 is faster)")
        print("# auto picked: " + ", ".join(f"{human(b)}: {a}" for b, a in sorted(auto_pick.items())))
        if args.csv:
            with open(args.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
        if args.png:
            plot(rows, algos, n, hvd.mpi_thread_level(), args.png)
    hvd.shutdown()


def plot(rows, algos, n, level, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# matplotlib not installed (pip install hvlite[plot]); no picture", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for a in algos:
        pts = [(r["bytes"], r["busbw_GBps"]) for r in rows if r["algorithm"] == a]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                linestyle="--" if a in ("mpi", "memcpy") else "-",
                label={"mpi": "MPI_Allreduce", "memcpy": "memcpy (ceiling)"}.get(a, a))
    ax.set_xscale("log", base=2)
    sizes = sorted({r["bytes"] for r in rows})
    ax.set_xticks(sizes, [human(b).replace(" ", "") for b in sizes])
    ax.set_xlabel("buffer size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"all-reduce, {n} ranks, float32 sum, {level}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"# wrote {path}")


if __name__ == "__main__":
    main()
