"""What elastic training costs: a commit against a training step, and a failure's recovery time.

    hvliterun -np 3 python scripts/bench_elastic.py commit [--model digits|34mb|both]
    python scripts/bench_elastic.py recovery [--runs 3] [--np 3]

commit: the digits MLP of examples/train_digits.py (64-128-64-10, 70 KB of float32 parameters)
and the same MLP widened to 34 MB (64-2048-2048-2048-10), each with SGD momentum (so a commit
holds twice the parameters' bytes), trained by DistributedOptimizer on the digits data. It
times --steps steps without commits, then --commits commits, each split into its parts: the
snapshot (copies in memory), the durable write (encoding with its checksum, fsync, rename, fsync of the directory,
on HVLITE_ELASTIC_DIR or a temporary directory) and the collective that ends it. Rank 0 prints
medians; the commit's cost is the slowest rank's.

recovery: runs `hvliterun --elastic` on examples/train_digits.py --elastic with rank 1 killed
(SIGKILL) at step 200, --runs times, and prints the time from the kill to the first step after
the relaunch (from the example's --events log), and the job's accuracy.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

MODELS = {"digits": (64, 128, 64, 10), "34mb": (64, 2048, 2048, 2048, 10)}


def bench_commit(args):
    import numpy as np

    import hvlite as hvd
    from hvlite.elastic import codec
    from hvlite.elastic import store as store_mod
    from hvlite.optim import SGD, DistributedOptimizer
    from train_digits import MLP, load_data

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    own = None
    base_dir = os.environ.get("HVLITE_ELASTIC_DIR")
    if not base_dir:
        base_dir = own = hvd.broadcast_object(tempfile.mkdtemp(prefix="hvlite-bench-elastic-")
                                              if rank == 0 else None, 0)
    (xtr, ytr), _ = load_data()
    per_rank = 64 // size
    names = list(MODELS) if args.model == "both" else [args.model]
    rows = []
    for name in names:
        os.environ["HVLITE_ELASTIC_DIR"] = os.path.join(base_dir, name)   # one state per dir
        model = MLP(MODELS[name])
        base = SGD(0.05 * size, momentum=0.9)
        opt = DistributedOptimizer(base, model.params, prefix=f"grad.{name}.")
        state = hvd.elastic.NumpyState(model.params, base, step=0)
        state.sync()

        def step(i):
            idx = np.arange(i * 64 + rank * per_rank, i * 64 + (rank + 1) * per_rank) % len(xtr)
            model.loss_and_backward(xtr[idx], ytr[idx], opt.grad_ready)
            opt.step()
            state.step += 1

        for i in range(2):                       # warm-up: buffers, the response cache
            step(i)
        hvd.barrier()
        times = []
        for i in range(args.steps):
            t0 = time.perf_counter()
            step(i)
            times.append(time.perf_counter() - t0)
        parts = {"snapshot": [], "write": [], "collective": [], "commit": []}
        store = store_mod.Store(os.environ["HVLITE_ELASTIC_DIR"], rank)
        for _ in range(args.commits):
            hvd.barrier()
            t0 = time.perf_counter()
            state.commit()
            parts["commit"].append(time.perf_counter() - t0)
            # the same work, timed part by part
            hvd.barrier()
            t0 = time.perf_counter()
            snap = state._capture()
            t1 = time.perf_counter()
            store.write(10 ** 6, codec.encode({"commit": 10 ** 6}, snap))
            t2 = time.perf_counter()
            state.check_host_updates()
            t3 = time.perf_counter()
            parts["snapshot"].append(t1 - t0)
            parts["write"].append(t2 - t1)
            parts["collective"].append(t3 - t2)
        store.prune_after(10 ** 6 - 1)
        mine = {k: statistics.median(v) for k, v in parts.items()}
        mine["step"] = statistics.median(times)
        slowest = {k: max(r[k] for r in hvd.allgather_object(mine)) for k in mine}
        nbytes = os.path.getsize(store.commit_path(state.commit_id))
        rows.append((name, nbytes, slowest))
    if rank == 0:
        print(f"ranks {size}; medians of {args.steps} steps and {args.commits} commits; the "
              f"slowest rank's; commits in {base_dir}")
        print(f"{'model':>7} {'commit size':>12} {'step ms':>8} {'commit ms':>10} "
              f"{'= snapshot':>11} {'+ write':>8} {'+ collective':>13} {'commit/step':>12}")
        for name, nbytes, t in rows:
            print(f"{name:>7} {nbytes / 1e6:>10.2f}MB {t['step'] * 1e3:>8.2f} "
                  f"{t['commit'] * 1e3:>10.2f} {t['snapshot'] * 1e3:>11.2f} "
                  f"{t['write'] * 1e3:>8.2f} {t['collective'] * 1e3:>13.3f} "
                  f"{t['commit'] / t['step']:>11.2f}x")
    hvd.barrier()
    if own and rank == 0:
        import shutil
        shutil.rmtree(own, ignore_errors=True)
    hvd.shutdown()


def bench_recovery(args):
    """Phases from hvliterun's stderr (time-stamped here as its lines arrive) and the example's
    events: the kill -> hvliterun starts the next launch (teardown, summary, clean-up) ->
    rank 0 has restored the commit (start-up: mpiexec, Python, imports, MPI, init) -> the
    first step."""
    rows = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="hvlite-bench-recovery-") as d:
            events = os.path.join(d, "events.jsonl")
            cmd = [sys.executable, "-m", "hvlite.run", "--elastic", "--min-np", "2",
                   "--max-np", str(args.np), sys.executable,
                   os.path.join(ROOT, "examples", "train_digits.py"), "--elastic",
                   "--commit-every", str(args.commit_every), "--fail-at", "200:1",
                   "--events", events]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True)
            relaunch, tail = None, []
            for line in proc.stderr:
                tail = (tail + [line])[-40:]
                if relaunch is None and line.startswith("hvliterun: elastic: launch 1"):
                    relaunch = time.time()
            if proc.wait(timeout=600) != 0 or relaunch is None:
                sys.exit(f"run {run}: hvliterun exited {proc.returncode}:\n{''.join(tail)}")
            with open(events) as f:
                log = [json.loads(line) for line in f]
            fail = next(e for e in log if e["event"] == "fail")
            first = next(e for e in log if e["event"] == "step" and e["launch"] == 1)
            restore = next(e for e in log if e["event"] == "restore" and e["launch"] == 1)
            done = next(e for e in log if e["event"] == "done")
            row = {"total": first["t"] - fail["t"], "teardown": relaunch - fail["t"],
                   "startup": restore["t"] - relaunch, "first step": first["t"] - restore["t"],
                   "accuracy": done["accuracy"]}
            rows.append(row)
            print(f"run {run}: killed at step 200, restored step {restore['step']} (commit "
                  f"{restore['commit']}); first step {row['total']:.2f} s after the kill = "
                  f"{row['teardown']:.2f} s to the relaunch + {row['startup']:.2f} s to the "
                  f"restored state + {row['first step']:.3f} s to the first step; accuracy "
                  f"{done['accuracy']:.1%}", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"failure to first step after restart, {args.np} ranks, {args.runs} runs: median "
          f"{med['total']:.2f} s (min {min(r['total'] for r in rows):.2f}, max "
          f"{max(r['total'] for r in rows):.2f}) = {med['teardown']:.2f} s teardown + "
          f"{med['startup']:.2f} s start-up and restore + {med['first step']:.3f} s to the first "
          f"step (medians); accuracy {min(r['accuracy'] for r in rows):.1%}.."
          f"{max(r['accuracy'] for r in rows):.1%}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("commit")
    c.add_argument("--model", choices=list(MODELS) + ["both"], default="both")
    c.add_argument("--steps", type=int, default=30)
    c.add_argument("--commits", type=int, default=10)
    r = sub.add_parser("recovery")
    r.add_argument("--runs", type=int, default=3)
    r.add_argument("--np", type=int, default=3)
    r.add_argument("--commit-every", type=int, default=30)
    args = p.parse_args()
    bench_commit(args) if args.what == "commit" else bench_recovery(args)


if __name__ == "__main__":
    main()
