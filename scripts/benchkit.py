"""What the benchmarks share: sizes as they read and print them ("4K", "64M" -> bytes -> "4 KiB"),
their CSV and their pictures. Nothing here imports hvlite, so a script run in a venv without it
(bench_mpis.py's side MPIs) can use it."""
import csv
import sys

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


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def pyplot():
    """matplotlib's pyplot drawing to files, or None (said on stderr) when it is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# matplotlib not installed (pip install hvlite[plot]); no picture", file=sys.stderr)
        return None
    return plt


def shuffled_medians(comm, MAX, fns, warm, budget_s, max_reps, min_reps=5):
    """Median seconds per call of each column of fns (name -> a call), a repetition's time the
    slowest rank's: every repetition runs every column once, in a fresh random order (the same
    on every rank), so the machine's drift hits them alike. warm(once) runs the warm-up calls
    (once(column) times one call). Returns ({column: seconds}, repetitions)."""
    import time
    import numpy as np
    cols = list(fns)

    def once(c):
        comm.Barrier()
        t0 = time.perf_counter()
        fns[c]()
        return time.perf_counter() - t0
    warm(once)
    est = comm.allreduce(max(once(c) for c in cols), op=MAX)
    reps = int(max(min_reps, min(max_reps, budget_s / max(est * len(cols), 1e-7))))
    times = np.zeros((len(cols), reps))
    order = np.random.default_rng(reps)          # same seed, so the same order on every rank
    for i in range(reps):
        for j in order.permutation(len(cols)):
            times[j, i] = once(cols[j])
    slowest = np.empty_like(times)
    comm.Allreduce(times, slowest, op=MAX)
    return {c: float(np.median(slowest[j])) for j, c in enumerate(cols)}, reps

