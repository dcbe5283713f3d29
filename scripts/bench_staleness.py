"""All-reduce vs the parameter server's modes, with and without a straggler.

    python scripts/bench_staleness.py [--workers 3] [--servers 1] [--repeats 3] [--epochs 10]

Runs examples/train_digits.py per (mode, straggler) `repeats` times: all-reduce on W ranks, the
PS modes on W workers + S servers (the same workers, the same data per step). The straggler is
worker 1, sleeping (F-1) times its compute every step. Reports medians of: wall time of the
whole run (slowest rank), time until worker 0's test accuracy first reaches the target, final
accuracy, samples/s, and the staleness histogram (of the first run); writes a CSV and a plot of
accuracy against wall time (the first run of each).
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = [("allreduce", []), ("ps-sync", []), ("ssp", ["--staleness", "1"]),
         ("ssp", ["--staleness", "3"]), ("ps-async", [])]


def run(mode, extra, args, slow, tmp):
    ranks = args.workers + (0 if mode == "allreduce" else args.servers)
    out = os.path.join(tmp, "summary.json")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = [mpiexec, "-n", str(ranks), sys.executable, os.path.join(ROOT, "examples", "train_digits.py"),
           "--mode", mode, "--epochs", str(args.epochs), "--eval-every", "5", "--json", out] + extra
    if mode != "allreduce":
        cmd += ["--servers", str(args.servers)]
    if slow:
        cmd += ["--slow-rank", "1", "--slow-factor", str(args.slow_factor)]
    env = dict(os.environ, PYTHONPATH=ROOT, HVLITE_PROBE="0")
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True, timeout=120)
    with open(out) as f:
        return json.load(f)


def time_to(curve, target):
    return next((t for t, _, acc in curve if acc >= target), float("nan"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--slow-factor", type=float, default=4.0)
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--csv", default=os.path.join(ROOT, "docs", "bench_staleness.csv"))
    p.add_argument("--png", default=os.path.join(ROOT, "docs", "bench_staleness.png"))
    args = p.parse_args()
    rows, curves = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for slow in (False, True):
            for mode, extra in MODES:
                label = mode + (f" k={extra[1]}" if extra else "")
                runs = [run(mode, extra, args, slow, tmp) for _ in range(args.repeats)]
                curves[(label, slow)] = runs[0]["curve"]
                hist = runs[0].get("staleness_hist", {})
                rows.append({
                    "mode": label, "straggler": f"x{args.slow_factor:g}" if slow else "none",
                    "seconds": statistics.median(r["seconds"] for r in runs),
                    "time_to_target_s": statistics.median(time_to(r["curve"], args.target) for r in runs),
                    "final_accuracy": statistics.median(r["accuracy"] for r in runs),
                    "samples_per_s": statistics.median(r["samples_per_s"] for r in runs),
                    "staleness_hist": " ".join(f"{k}:{v}" for k, v in hist.items()) or "-"})
                print("  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                for k, v in rows[-1].items()), flush=True)
    for r in rows:       # ratios against all-reduce in the same straggler setting, same run
        ref = next(x for x in rows if x["mode"] == "allreduce" and x["straggler"] == r["straggler"])
        r["time_vs_allreduce"] = r["seconds"] / ref["seconds"]
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot(curves, args)
    print(f"wrote {args.csv} and {args.png}")


def plot(curves, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, slow in zip(axes, (False, True)):
        for (label, s), curve in curves.items():
            if s == slow and curve:
                ax.plot([c[0] for c in curve], [c[2] for c in curve], label=label)
        ax.axhline(args.target, color="grey", lw=0.5, ls="--")
        ax.set_title(f"{args.workers} workers, " + (f"worker 1 x{args.slow_factor:g} slower" if slow else "no straggler"))
        ax.set_xlabel("wall time (s)")
        ax.set_ylim(0.5, 1.0)
    axes[0].set_ylabel("test accuracy (worker 0)")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
