"""Gradient compression on real training: accuracy, bytes per step and step time per method.

    mpiexec -n 2 python scripts/bench_compression.py --model digits --out docs/bench_compression.csv
    mpiexec -n 2 python scripts/bench_compression.py --model large --steps 6 --methods none,fp16,topk,sign,powersgd --out docs/bench_compression.csv
    python scripts/bench_compression.py --plot docs/bench_compression.csv      # PNG + README table

digits: examples/train_digits.py's MLP and data (SGD with momentum, warm-up, the example's
defaults), trained to the end with each method; accuracy on the held-out fifth. large: the
1024-2048-2048-1024-10 MLP of bench_training_numpy.py (34 MB of float32 gradients) on synthetic data,
a few steps for bytes and step time only. Bytes come from hvlite.compression.stats():
payload = the compressed message per rank and step, wire = what one rank then sends (ring
all-reduce 2(n-1)/n of it, all-gather n-1 times it); ratios are against the dense all-reduce.
Step time: median over the run of rank 0's forward+backward+step, against `none` in the same run.
Rows are appended to the CSV (rank 0), one per (model, ranks, method).
"""
import argparse
import csv
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

METHODS = {
    "none": lambda C: C.none, "fp16": lambda C: C.fp16, "bf16": lambda C: C.bf16,
    "int8": lambda C: C.int8(), "topk1%": lambda C: C.topk(ratio=0.01),
    "randomk1%": lambda C: C.randomk(ratio=0.01), "sign": lambda C: C.sign(),
    "powersgd2": lambda C: C.powersgd(rank=2),
    # momentum inside the compressor, before compression (run with --momentum 0)
    "sign+m0.9": lambda C: C.sign(momentum=0.9), "topk1%+m0.9": lambda C: C.topk(ratio=0.01, momentum=0.9),
}
DEFAULT = "none,fp16,bf16,int8,topk1%,randomk1%,sign,powersgd2"
FIELDS = ["model", "ranks", "lr", "momentum", "seed", "method", "steps", "accuracy", "dense_bytes", "payload_bytes",
          "wire_bytes", "ratio", "wire_ratio", "weight_ratio", "step_ms", "time_vs_none"]


def train(method, args, hvd, rank, size):
    from train_digits import MLP, load_data
    from hvlite.compression import Compression, stats
    from hvlite.optim import SGD, DistributedOptimizer, broadcast_parameters, scaled_lr, warmup_lr
    large = args.model == "large"
    sizes = (1024, 2048, 2048, 1024, 10) if large else (64, 128, 64, 10)
    model = MLP(sizes, seed=args.seed)
    broadcast_parameters(model.params, root_rank=0)
    if large:
        rng = np.random.default_rng(rank)
        xtr = rng.standard_normal((64 * size, sizes[0])).astype(np.float32)
        ytr = rng.integers(0, 10, len(xtr))
        xte = yte = None
    else:
        (xtr, ytr), (xte, yte) = load_data()
    target_lr = scaled_lr(args.lr, size)
    opt = DistributedOptimizer(SGD(target_lr, momentum=args.momentum), model.params,
                               compression=METHODS[method](Compression), prefix=f"{method}.")
    stats(reset=True)
    per_rank = args.batch // size
    steps_per_epoch = len(xtr) // args.batch
    total = args.steps if large else args.epochs * steps_per_epoch
    rng = np.random.default_rng(args.seed)
    times, step = [], 0
    while step < total:
        order = rng.permutation(len(xtr))
        for s in range(steps_per_epoch):
            if step == total:
                break
            idx = order[s * args.batch:(s + 1) * args.batch][rank * per_rank:(rank + 1) * per_rank]
            opt.lr = warmup_lr(step, target_lr / size, target_lr, 20)
            t0 = time.perf_counter()
            model.loss_and_backward(xtr[idx], ytr[idx], opt.grad_ready)
            opt.step()
            times.append(time.perf_counter() - t0)
            step += 1
    st = stats()
    m = next(iter(st["methods"].values()))
    weights = [t for tensors in st["tensors"].values() for n, t in tensors.items() if n.endswith(".w")]
    w_dense = sum(t["dense_bytes"] for t in weights)
    w_payload = sum(t["payload_bytes"] for t in weights)
    acc = model.accuracy(xte, yte) if xte is not None else float("nan")
    return {"model": args.model, "ranks": size, "lr": args.lr, "momentum": args.momentum,
            "seed": args.seed, "method": method, "steps": total,
            "accuracy": acc, "dense_bytes": m["dense_bytes"] / total,
            "payload_bytes": m["payload_bytes"] / total, "wire_bytes": m["wire_bytes"] / total,
            "ratio": m["ratio"], "wire_ratio": m["wire_ratio"], "weight_ratio": w_dense / w_payload,
            "step_ms": 1e3 * float(np.median(times[3:] if len(times) > 6 else times))}


def run(args):
    import hvlite as hvd
    np.seterr(all="ignore")          # a diverging method shows in its accuracy, not in warnings
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    rows = []
    for method in args.methods.split(","):
        if method not in METHODS:
            raise SystemExit(f"unknown method {method!r}; use {', '.join(METHODS)}")
        rows.append(train(method, args, hvd, rank, size))
        if rank == 0:
            r = rows[-1]
            print(f"{args.model} n={size} {method:>10}: accuracy {r['accuracy']:.2%}, "
                  f"{r['payload_bytes']:.0f} B/step ({r['ratio']:.1f}x, wire {r['wire_ratio']:.1f}x, "
                  f"weights {r['weight_ratio']:.1f}x), {r['step_ms']:.2f} ms/step", flush=True)
    base = {r["model"]: r["step_ms"] for r in rows if r["method"] == "none"}
    for r in rows:
        r["time_vs_none"] = r["step_ms"] / base[r["model"]] if r["model"] in base else float("nan")
    if rank == 0 and args.out:
        new = not os.path.exists(args.out)
        with open(args.out, "a", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            if new:
                w.writeheader()
            w.writerows(rows)
    hvd.shutdown()


def summarize(rows):
    """Rows grouped by (model, ranks, recipe, method): accuracy averaged over the seeds run, the
    accuracy gap and step-time ratio against `none` of the same group."""
    groups = {}
    for r in rows:
        key = (r["model"], int(r["ranks"]), float(r["lr"]), float(r["momentum"]), r["method"])
        groups.setdefault(key, []).append(r)
    out = []
    for key, rs in groups.items():
        f = {k: float(np.mean([float(r[k]) for r in rs])) for k in
             ("accuracy", "payload_bytes", "wire_bytes", "ratio", "wire_ratio", "weight_ratio", "step_ms")}
        f["time_vs_none"] = float(np.median([float(r["time_vs_none"]) for r in rs]))
        out.append({"model": key[0], "ranks": key[1], "lr": key[2], "momentum": key[3],
                    "method": key[4], "seeds": len(rs), **f})
    for r in out:     # momentum inside the compressor is compared with dense SGD's momentum
        mom = float(r["method"].split("+m")[1]) if "+m" in r["method"] else r["momentum"]
        base = [b for b in out if b["method"] == "none" and b["momentum"] == mom and
                all(b[k] == r[k] for k in ("model", "ranks", "lr"))]
        r["gap"] = 100 * (r["accuracy"] - base[0]["accuracy"]) if base else float("nan")
        if np.isnan(r["time_vs_none"]):      # no `none` in its run: against the recipe's none
            same = [b for b in out if b["method"] == "none" and
                    all(b[k] == r[k] for k in ("model", "ranks", "lr", "momentum"))]
            r["time_vs_none"] = r["step_ms"] / same[0]["step_ms"] if same else float("nan")
    return out


FLOOR = 95.0


def plot(path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(path) as f:
        rows = summarize(list(csv.DictReader(f)))
    digits = [r for r in rows if r["model"] == "digits"]
    recipes = sorted({(r["lr"], r["momentum"]) for r in digits}, key=lambda t: -t[1])
    fig, axes = plt.subplots(1, len(recipes), figsize=(6.5 * len(recipes), 4.5), squeeze=False)
    for ax, (lr, mom) in zip(axes[0], recipes):
        for n, marker in ((2, "o"), (4, "s")):
            pts = [r for r in digits if r["ranks"] == n and (r["lr"], r["momentum"]) == (lr, mom)]
            ys = [max(100 * r["accuracy"], FLOOR) for r in pts]      # far below: on the floor
            ax.scatter([r["payload_bytes"] for r in pts], ys, marker=marker, label=f"{n} ranks")
            for r, y in zip(pts, ys):
                label = r["method"] + (f" ({100 * r['accuracy']:.1f}%)" if y == FLOOR else "")
                ax.annotate(label, (r["payload_bytes"], y), fontsize=7, xytext=(3, 3 + 8 * (n == 4)),
                            textcoords="offset points")
        ax.set_ylim(FLOOR - 0.3, 99.2)
        ax.set_xscale("log")
        ax.set_xlabel("bytes sent per rank per step (payload)")
        ax.set_ylabel("test accuracy (%), mean over seeds")
        ax.set_title(f"digits MLP, SGD lr {lr} x ranks, momentum {mom}")
        ax.grid(alpha=0.3)
        ax.legend()
    out = os.path.splitext(path)[0] + ".png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    print("| model | ranks | lr, momentum | method | accuracy (seeds) | vs none | bytes/step | "
          "ratio | wire ratio | weights ratio | step ms | time vs none |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        acc = "" if np.isnan(r["accuracy"]) else f"{100 * r['accuracy']:.2f}% ({r['seeds']})"
        gap = "" if np.isnan(r["gap"]) else f"{r['gap']:+.2f}"
        print(f"| {r['model']} | {r['ranks']} | {r['lr']:g}, {r['momentum']:g} | {r['method']} | {acc} | "
              f"{gap} | {r['payload_bytes']:,.0f} | {r['ratio']:.1f}x | {r['wire_ratio']:.1f}x | "
              f"{r['weight_ratio']:.1f}x | {r['step_ms']:.2f} | {r['time_vs_none']:.2f}x |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("digits", "large"), default="digits")
    p.add_argument("--methods", default=DEFAULT, help=f"any of {', '.join(METHODS)}")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--steps", type=int, default=6, help="steps of the large model")
    p.add_argument("--batch", type=int, default=64, help="global batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="append the rows to this CSV")
    p.add_argument("--plot", default=None, metavar="CSV", help="draw the CSV and print the table")
    args = p.parse_args()
    if args.plot:
        plot(args.plot)
    else:
        run(args)


if __name__ == "__main__":
    main()
