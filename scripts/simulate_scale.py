"""The cost model past this machine: all-reduce and step time from 8 to 1,024 ranks.

    python scripts/simulate_scale.py [--plot docs/scale.png] [--csv docs/scale.csv]
    python scripts/simulate_scale.py --check

Default: a 100 MB float32 gradient, 8 ranks per node, 25 Gbit/s between nodes; for each count of
ranks, the all-reduce time of every algorithm, then a training step (compute 250 ms, the backward
pass 2/3 of it) with and without overlap and compression, and the share of the step that
aggregation leaves exposed. Every all-reduce time is hvlite._core.tuning.cost_model's prediction, the
model behind algorithm="auto" (see scripts/scale_model.py for what is added around it).

--check: the model against every configuration measured on the emulated cluster
(docs/bench_multihost.csv: 2 hosts of 2 ranks, links shaped at 0.5, 1 and 2.5 Gbit/s), per
algorithm and size, with the error and whether it is within 25%; links where the two cores,
not the link, were the limit are shown apart.

No MPI is started. docs/scale.md has the tables, the figure and the assumptions.
"""
import argparse
import csv
import sys

import scale_model as sm

RANKS = [8, 16, 32, 64, 128, 256, 512, 1024]


def ms(s):
    return f"{s * 1e3:.1f}"


# ---- --check ----------------------------------------------------------------------------------

def run_check(args):
    def figures_for(rate):
        return sm.Figures(rate, args.check_alpha_inter, **intra_figures(args))

    rows = []
    for path, hosts, per_node in args.measured:
        rows += sm.check(sm.load_measured(path), hosts, per_node, tolerance=args.tolerance,
                         figures_for=figures_for)
    tol = f"{args.tolerance:.0%}"
    groups = {}
    for r in rows:
        groups.setdefault((r["layout"], r["link"]), []).append(r)
    totals = {True: [0, 0, 0, 0], False: [0, 0, 0, 0]}
    for (layout, link), rs in groups.items():
        bound = rs[0]["link_bound"]
        what = "link-bound" if bound else "CPU-limited"
        hosts, per_node = layout.split("x")
        print(f"\n### {hosts} hosts x {per_node}, {link}: {what}\n")
        print(f"The fastest at the largest size took {rs[0]['best_over_link']:.2f}x the link time "
              f"of the fewest bytes per host" + ("." if bound else
                                                  ": the cores, not the link, are the limit.")
              + "\n")
        print(f"| size | algorithm | measured, ms (run 1 / run 2) | predicted, ms | error | within {tol} |")
        print("|---|---|---|---|---|---|")
        for r in rs:
            name = r["algorithm"] + (f" (model: {r['model_name']})" if r["algorithm"] == "auto" else "")
            print(f"| {sm.human_bytes(r['bytes'])} | {name} | "
                  f"{' / '.join(ms(m) for m in r['measured'])} | {ms(r['predicted'])} | "
                  f"{' / '.join(f'{e:+.0%}' for e in r['errors'])} | "
                  f"{'yes' if r['within'] else 'no'} |")
            t = totals[bound]
            t[0] += r["within"]
            t[1] += 1
            t[2] += sum(abs(e) <= args.tolerance for e in r["errors"])
            t[3] += len(r["errors"])
    print()
    for bound, label in ((True, "link-bound"), (False, "CPU-limited")):
        t = totals[bound]
        if t[1]:
            print(f"{label}: {t[0]} of {t[1]} cells within {tol} in every run "
                  f"({t[2]} of {t[3]} run medians)")
    misses = [r for r in rows if r["link_bound"] and not r["within"]]
    if misses:
        print("link-bound cells outside: " + "; ".join(
            f"{r['layout']} {r['link']} {sm.human_bytes(r['bytes'])} {r['algorithm']} "
            f"({' / '.join(f'{e:+.0%}' for e in r['errors'])})" for r in misses))
    return rows


# ---- the projection ---------------------------------------------------------------------------

def intra_figures(args):
    return {"alpha_intra": args.alpha_intra, "beta_intra": 1 / (args.intra_gbps * 1e9),
            "gamma": 1 / (args.gamma_gbps * 1e9), "beta_mem": 1 / (args.mem_gbps * 1e9),
            "alpha_shm": args.alpha_shm}


def scenarios(args):
    out = [(sm.Compression("none"), False), (sm.Compression("none"), True)]
    fp16 = sm.Compression("fp16", cast_round_trip=1 / (args.cast_gbps * 1e9))
    out += [(fp16, False), (fp16, True)]
    if args.topk_ratio > 0:
        out.append((sm.Compression("topk", ratio=args.topk_ratio,
                                   topk_select=1 / (args.topk_select_gbps * 1e9)), True))
    return out


def label(comp, overlap):
    return ("fp32" if comp.method == "none" else comp.label) + (" + overlap" if overlap else "")


def project(args):
    fig = sm.Figures(sm.parse_rate(args.link), args.alpha_inter, **intra_figures(args))
    step = sm.Step(args.compute_ms / 1e3, args.backward_fraction, tuple(args.buckets),
                   args.cycle_ms / 1e3)
    n = args.gradient_mb * 1e6
    allreduce, best, rows = {}, {}, []
    for ranks in args.ranks:
        for algo in sm.ALGORITHMS:
            t = sm.allreduce_seconds(algo, n, ranks, args.per_node, fig)
            allreduce[ranks, algo] = t
            rows.append({"ranks": ranks, "nodes": max(1, ranks // args.per_node),
                         "algorithm": sm.LABELS.get(algo, algo), "compression": "none",
                         "overlap": "", "bucket_bytes": "", "allreduce_s": t, "step_s": "",
                         "exposed_s": "", "share": ""})
        for comp, overlap in scenarios(args):
            algos = sm.ALGORITHMS if comp.method != "topk" else ("allgather",)
            for algo in algos:
                r = sm.scenario(n, ranks, args.per_node, fig, step, comp, overlap, (algo,))
                rows.append({"ranks": ranks, "nodes": max(1, ranks // args.per_node),
                             "algorithm": sm.LABELS.get(algo, algo), "compression": comp.label,
                             "overlap": int(overlap), "bucket_bytes": r["bucket_bytes"],
                             "allreduce_s": "", "step_s": r["step_s"],
                             "exposed_s": r["exposed_s"], "share": r["share"]})
            best[ranks, label(comp, overlap)] = sm.scenario(n, ranks, args.per_node, fig, step,
                                                            comp, overlap)
    return fig, step, allreduce, best, rows


def print_projection(args, fig, step, allreduce, best):
    print(f"{args.gradient_mb:g} MB float32 gradient, {args.per_node} ranks per node, "
          f"{args.link} between nodes (alpha {args.alpha_inter * 1e6:g} us); within a node alpha "
          f"{args.alpha_intra * 1e6:g} us, {args.intra_gbps:g} GB/s, copy {args.mem_gbps:g} GB/s; "
          f"reduce {args.gamma_gbps:g} GB/s")
    print("\nAll-reduce of the whole gradient, ms (auto: the model's pick with a shared segment):\n")
    heads = [sm.LABELS.get(a, a) for a in sm.ALGORITHMS]
    print("| ranks | nodes | " + " | ".join(heads) + " | auto |")
    print("|---" * (len(heads) + 3) + "|")
    for ranks in args.ranks:
        ts = [allreduce[ranks, a] for a in sm.ALGORITHMS]
        low = min(ts)
        cells = [f"**{ms(t)}**" if t == low else ms(t) for t in ts]
        pick = sm.auto_choice(args.gradient_mb * 1e6, ranks, args.per_node, fig)
        print(f"| {ranks} | {max(1, ranks // args.per_node)} | " + " | ".join(cells)
              + f" | {sm.LABELS.get(pick, pick)} |")
    names = [label(c, o) for c, o in scenarios(args)]
    print(f"\nStep: compute {args.compute_ms:g} ms, the backward pass {args.backward_fraction:.2f} "
          f"of it; overlap reduces buckets as the backward pass produces them, the best of "
          f"{', '.join(sm.human_bytes(b) for b in args.buckets)} and the whole gradient, each "
          f"bucket a coordinator round (an agreement, at least {args.cycle_ms:g} ms). "
          f"Aggregation's exposed share of the step, the step in ms, the best algorithm "
          f"(and bucket):\n")
    print("| ranks | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for ranks in args.ranks:
        cells = []
        for name in names:
            b = best[ranks, name]
            bucket = (f", {sm.human_bytes(b['bucket_bytes'])}" if "overlap" in name and
                      b["bucket_bytes"] < args.gradient_mb * 1e6 else "")
            cells.append(f"{b['share']:.1%} · {ms(b['step_s'])} · "
                         f"{sm.LABELS.get(b['algorithm'], b['algorithm'])}{bucket}")
        print(f"| {ranks} | " + " | ".join(cells) + " |")
    return names


def print_per_algorithm(args, rows, names):
    """At the largest count, every algorithm's exposed share in every scenario."""
    top = max(args.ranks)
    print(f"\nAt {top} ranks, each algorithm: exposed share of the step (bucket with overlap):\n")
    print("| algorithm | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    cell = {}
    for r in rows:
        if r["ranks"] == top and r["step_s"] != "":
            name = ("fp32" if r["compression"] == "none" else r["compression"]) + (
                " + overlap" if r["overlap"] else "")
            bucket = (f" ({sm.human_bytes(r['bucket_bytes'])})" if r["overlap"] and
                      r["bucket_bytes"] < args.gradient_mb * 1e6 else "")
            cell[r["algorithm"], name] = f"{r['share']:.1%}{bucket}"
    for algo in [sm.LABELS.get(a, a) for a in sm.ALGORITHMS] + ["allgather"]:
        if any((algo, n) in cell for n in names):
            print(f"| {algo} | " + " | ".join(cell.get((algo, n), "") for n in names) + " |")


def answer(args, best, names):
    """The summary line: at the largest count, which scenarios keep aggregation under the
    target share of a step."""
    top = max(args.ranks)
    under = [(name, best[top, name]) for name in names if best[top, name]["share"] < args.target]
    parts = "; ".join(f"{name} {best[top, name]['share']:.1%} "
                      f"({sm.LABELS.get(best[top, name]['algorithm'], best[top, name]['algorithm'])})"
                      for name in names)
    if under:
        name, b = min(under, key=lambda u: u[1]["share"])
        verdict = (f"yes: {', '.join(n for n, _ in under)} {'stays' if len(under) == 1 else 'stay'} under {args.target:.0%}; "
                   f"lowest {name} with {sm.LABELS.get(b['algorithm'], b['algorithm'])} "
                   f"({b['share']:.1%})")
    else:
        verdict = f"no: none stays under {args.target:.0%}"
    return f"At {top} ranks aggregation takes {parts} of a step. Under {args.target:.0%}? {verdict}."


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def plot(path, args, allreduce, best, names):
    print("# plotting ...", file=sys.stderr, flush=True)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print("# matplotlib not installed (pip install hvlite[plot]); no picture", file=sys.stderr)
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    for algo in sm.ALGORITHMS:
        left.plot(args.ranks, [allreduce[r, algo] * 1e3 for r in args.ranks], marker="o",
                  label=sm.LABELS.get(algo, algo))
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    left.set_xlabel("ranks (8 per node)")
    left.set_ylabel("all-reduce, ms")
    left.set_title(f"{args.gradient_mb:g} MB all-reduce, {args.link} links")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    for name in names:
        right.plot(args.ranks, [best[r, name]["share"] * 100 for r in args.ranks], marker="o",
                   label=name)
    right.axhline(args.target * 100, color="grey", linestyle="--", label=f"{args.target:.0%}")
    right.set_xscale("log", base=2)
    right.set_xlabel("ranks (8 per node)")
    right.set_ylabel("exposed aggregation, % of step")
    right.set_title(f"step: {args.compute_ms:g} ms compute, best algorithm per point")
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"# wrote {path}", file=sys.stderr)


def measure(args):
    """γ and β_mem measured here, replacing the defaults."""
    print("# measuring the reduction and copy rates ...", file=sys.stderr, flush=True)
    from hvlite._core.tuning.probes import copy_seconds_per_byte, reduce_seconds_per_byte
    args.gamma_gbps = 1 / min(reduce_seconds_per_byte() for _ in range(3)) / 1e9
    args.mem_gbps = 1 / min(copy_seconds_per_byte() for _ in range(3)) / 1e9
    print(f"# reduce {args.gamma_gbps:.2f} GB/s, copy {args.mem_gbps:.2f} GB/s", file=sys.stderr)


def parse_size(text):
    t = text.strip().upper().rstrip("IB")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(float(t[:-1] if t[-1:] in "KMG" else t) * mult)


def measured_arg(text):
    out = []
    for item in text.split(","):
        path, _, layout = item.rpartition(":")
        hosts, per_node = layout.lower().split("x")
        out.append((path, int(hosts), int(per_node)))
    return out


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true",
                   help="the model against docs/bench_multihost.csv instead of the projection")
    p.add_argument("--measured", type=measured_arg, default=sm.CONFIGURATIONS,
                   help="the emulated cluster's CSVs, PATH:HOSTSxRANKS,... (default: "
                        "docs/bench_multihost.csv:2x2,docs/bench_multihost_4x1.csv:4x1)")
    p.add_argument("--tolerance", type=float, default=0.25)
    p.add_argument("--check-alpha-inter", type=float, default=30e-6,
                   help="s per message across emulated hosts (TCP over veth)")
    p.add_argument("--ranks", type=lambda s: [int(x) for x in s.split(",")], default=RANKS)
    p.add_argument("--per-node", type=int, default=8)
    p.add_argument("--gradient-mb", type=float, default=100.0, help="float32 gradient, 1e6 bytes")
    p.add_argument("--link", default="25gbit", help="each node's link (bits/s: 25gbit, 100gbit)")
    p.add_argument("--alpha-inter", type=float, default=5e-6, help="s per message between nodes")
    p.add_argument("--alpha-intra", type=float, default=sm.ALPHA_INTRA,
                   help="s per message within a node")
    p.add_argument("--intra-gbps", type=float, default=1 / sm.BETA_INTRA / 1e9,
                   help="GB/s between two ranks of a node")
    p.add_argument("--gamma-gbps", type=float, default=1 / sm.GAMMA / 1e9,
                   help="GB/s reduced by one rank (float32 sum)")
    p.add_argument("--mem-gbps", type=float, default=1 / sm.BETA_MEM / 1e9,
                   help="GB/s copied by one rank (the shared segment's copies)")
    p.add_argument("--alpha-shm", type=float, default=sm.ALPHA_SHM, help="s per flag barrier")
    p.add_argument("--measure", action="store_true",
                   help="measure the reduction and copy rates here instead of the defaults")
    p.add_argument("--compute-ms", type=float, default=250.0, help="compute per step")
    p.add_argument("--backward-fraction", type=float, default=2 / 3,
                   help="the overlappable backward pass, as a fraction of compute")
    p.add_argument("--buckets", type=lambda s: [parse_size(x) for x in s.split(",")],
                   default=list(sm.BUCKETS),
                   help="bucket sizes overlap may use (the whole gradient is always one)")
    p.add_argument("--cycle-ms", type=float, default=1.0,
                   help="least time per coordinator round (HVLITE_CYCLE_TIME); one per bucket")
    p.add_argument("--cast-gbps", type=float, default=1 / sm.CAST_ROUND_TRIP / 1e9,
                   help="float32 GB/s through the fp16 cast and back")
    p.add_argument("--topk-ratio", type=float, default=0.01, help="top-k's share sent (0: none)")
    p.add_argument("--topk-select-gbps", type=float, default=1 / sm.TOPK_SELECT / 1e9,
                   help="float32 GB/s through top-k's selection")
    p.add_argument("--target", type=float, default=0.10, help="the share of a step to stay under")
    p.add_argument("--csv")
    p.add_argument("--plot", metavar="PATH")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    if args.measure:
        measure(args)
    if args.check:
        run_check(args)
        return
    fig, step, allreduce, best, rows = project(args)
    names = print_projection(args, fig, step, allreduce, best)
    print_per_algorithm(args, rows, names)
    print()
    print(answer(args, best, names))
    if args.csv:
        write_csv(args.csv, rows)
    if args.plot:
        plot(args.plot, args, allreduce, best, names)


if __name__ == "__main__":
    main()
