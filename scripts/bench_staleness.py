"""All-reduce vs the parameter server's modes, with no, a persistent and transient stragglers.

    python scripts/bench_staleness.py [--straggler none --straggler transient ...] [--repeats 3]
    python scripts/bench_staleness.py --plot-only      # CSV and plot from the stored runs

Runs examples/train_digits.py per (straggler model, mode) `repeats` times, the modes interleaved
within each repeat: all-reduce on W ranks (at a 0.1 ms coordinator cycle, and at the 1 ms
default), the PS modes on W workers + S servers (the same workers, data and delays). Every step
has --compute-ms of simulated compute (a sleep, so 2 shared cores do not turn CPU contention
into noise). Straggler models: `persistent` = worker 1 takes F times as long every step;
`transient` = every worker, every step, independently takes F times as long with probability p
(the same seeded schedule in every mode and repeat).

Reports medians of: wall time (slowest rank), time until worker 0's test accuracy first reaches
the target, final accuracy, samples/s, and the synchronisation overhead = wall time minus the
busiest worker's compute (its own sleeps included), which is what a mode can save; plus the
staleness histogram of the first run. Each straggler model's results are stored in --raw, so
the benchmark can run in pieces; the CSV and the plot (accuracy against wall time, one panel per
straggler model) are rebuilt from everything stored.
"""
import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("none", "persistent", "transient")
# (label, --mode, extra arguments, extra environment)
MODES = [("allreduce", "allreduce", [], {"HVLITE_CYCLE_TIME": "0.1"}),
         ("allreduce 1ms", "allreduce", [], {"HVLITE_CYCLE_TIME": "1"}),
         ("ps-sync", "ps-sync", [], {}),
         ("ssp k=1", "ssp", ["--staleness", "1"], {}),
         ("ssp k=3", "ssp", ["--staleness", "3"], {}),
         ("ps-async", "ps-async", [], {})]


def run(mode, extra, env_extra, model, args, tmp):
    ranks = args.workers + (0 if mode == "allreduce" else args.servers)
    out = os.path.join(tmp, "summary.json")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = [mpiexec, "-n", str(ranks), sys.executable, os.path.join(ROOT, "examples", "train_digits.py"),
           "--mode", mode, "--epochs", str(args.epochs), "--eval-every", "5", "--json", out,
           "--compute-ms", str(args.compute_ms), "--straggler", model,
           "--slow-factor", str(args.slow_factor), "--straggle-prob", str(args.straggle_prob)] + extra
    if mode != "allreduce":
        cmd += ["--servers", str(args.servers)]
    if model == "persistent":
        cmd += ["--slow-rank", "1"]
    env = dict(os.environ, PYTHONPATH=ROOT, HVLITE_PROBE="0", **env_extra)
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True, timeout=180)
    with open(out) as f:
        return json.load(f)


def time_to(curve, target):
    return next((t for t, _, acc in curve if acc >= target), math.inf)


def measure(model, args, tmp):
    """Every mode `repeats` times, interleaved, so drift in the machine's load hits all alike."""
    runs = {label: [] for label, *_ in MODES}
    for _ in range(args.repeats):
        for label, mode, extra, env in MODES:
            r = run(mode, extra, env, model, args, tmp)
            r["overhead_s"] = r["seconds"] - max(r["busy_s"])
            runs[label].append(r)
            print(f"  {model:10s} {label:14s} {r['seconds']:.3f} s, overhead {r['overhead_s']:.3f} s, "
                  f"acc {r['accuracy']:.3f}", flush=True)
    rows, curves = [], {}
    for label, rs in runs.items():
        hist = rs[0].get("staleness_hist", {})
        curves[label] = rs[0]["curve"]
        rows.append({
            "mode": label, "straggler": model,
            "seconds": statistics.median(r["seconds"] for r in rs),
            "overhead_s": statistics.median(r["overhead_s"] for r in rs),
            "busy_s": statistics.median(max(r["busy_s"]) for r in rs),
            "time_to_target_s": statistics.median(time_to(r["curve"], args.target) for r in rs),
            "final_accuracy": statistics.median(r["accuracy"] for r in rs),
            "samples_per_s": statistics.median(r["samples_per_s"] for r in rs),
            "slow_steps": sum(len(d) for d in rs[0]["delayed_steps"]),
            "staleness_hist": " ".join(f"{k}:{v}" for k, v in hist.items()) or "-"})
    for r in rows:       # ratios against references measured in the same piece
        ar = next(x for x in rows if x["mode"] == "allreduce")
        sync = next(x for x in rows if x["mode"] == "ps-sync")
        r["time_vs_allreduce"] = r["seconds"] / ar["seconds"]
        r["overhead_vs_ps_sync"] = r["overhead_s"] / sync["overhead_s"]
    return {"rows": rows, "curves": curves, "settings": {
        k: getattr(args, k) for k in ("workers", "servers", "repeats", "epochs", "compute_ms",
                                      "slow_factor", "straggle_prob", "target")}}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--straggler", action="append", choices=MODELS,
                   help="straggler model(s) to run (repeatable; default all)")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--compute-ms", type=float, default=20.0)
    p.add_argument("--slow-factor", type=float, default=4.0)
    p.add_argument("--straggle-prob", type=float, default=0.1)
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--raw", default=os.path.join(ROOT, "docs", "bench_staleness.json"))
    p.add_argument("--csv", default=os.path.join(ROOT, "docs", "bench_staleness.csv"))
    p.add_argument("--png", default=os.path.join(ROOT, "docs", "bench_staleness.png"))
    p.add_argument("--plot-only", action="store_true")
    args = p.parse_args()
    stored = {}
    if os.path.exists(args.raw):
        with open(args.raw) as f:
            stored = json.load(f)
    if not args.plot_only:
        with tempfile.TemporaryDirectory() as tmp:
            for model in args.straggler or MODELS:
                stored[model] = measure(model, args, tmp)
                with open(args.raw, "w") as f:
                    json.dump(stored, f, indent=1)
    rows = [r for m in MODELS if m in stored for r in stored[m]["rows"]]
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print("  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    plot(stored, args)
    print(f"wrote {args.csv} and {args.png}")


def plot(stored, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = [m for m in MODELS if m in stored]
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), sharey=True, squeeze=False)
    for ax, model in zip(axes[0], models):
        s = stored[model]["settings"]
        for label, curve in stored[model]["curves"].items():
            if curve:
                ax.plot([c[0] for c in curve], [c[2] for c in curve], label=label,
                        ls=":" if label == "allreduce 1ms" else "-")
        ax.axhline(s["target"], color="grey", lw=0.5, ls="--")
        f = f"{s['slow_factor']:g}"
        ax.set_title(f"{s['workers']} workers, " + {
            "none": "no straggler", "persistent": f"worker 1 always x{f}",
            "transient": f"each step x{f} with p={s['straggle_prob']:g}"}[model])
        ax.set_xlabel("wall time (s)")
        ax.set_ylim(0.5, 1.0)
    axes[0][0].set_ylabel("test accuracy (worker 0)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
