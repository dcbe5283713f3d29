"""Data-parallel training of a small MLP in pure NumPy on scikit-learn's bundled digits.

    hvliterun -np 2 python examples/train_digits.py [--epochs 30] [--timeline trace.json]
    hvliterun -np 4 python examples/train_digits.py --op adasum [--lr-scale 1]
    hvliterun -np 4 --servers 1 python examples/train_digits.py --mode ssp --staleness 2 \
        [--slow-rank 2 --slow-factor 3]
    hvliterun --elastic --min-np 2 --max-np 3 python examples/train_digits.py --elastic \
        [--commit-every 20] [--fail-at 200:1]

--mode allreduce (the default) is synchronous data-parallel SGD; ps-sync, ps-async and ssp run
the same model through hvlite.ps: the last --servers ranks hold the parameters, the others pull,
compute and push. Stragglers: --slow-rank R sleeps (F-1) times its compute every step
(--straggler persistent); --straggler transient makes every worker, every step, sleep (F-1) times
its compute with probability --straggle-prob, from a stream seeded by --seed and the worker's rank
(the same schedule in every mode). --compute-ms M adds M ms of simulated compute (a sleep) to
every step, so the job behaves like a bigger model without using more CPU.

--op adasum combines the ranks' updates with Adasum (Horovod's Adasum optimizer) instead of
averaging gradients. Its learning rate is --lr times --lr-scale, by default 1, not N: the global
batch is fixed, so each rank's share shrinks with N and the ranks' updates are nearly orthogonal,
which Adasum already adds up (Horovod's guide suggests 2-2.5 for a fixed batch per rank; here that
diverges at 4 ranks, see docs/horovod.md#adasum).

--elastic trains under hvlite.elastic (run it with hvliterun --elastic): the parameters, the
optimizer's state and the step count are a NumpyState, committed every --commit-every steps; a
relaunched job (after a failure, or larger when hosts were added) resumes from the last commit.
Batches are a function of the step alone, so a resumed job sees the ones it would have seen.
--fail-at STEP:RANK[:raise] shows recovery: on the first launch, rank RANK kills itself with
SIGKILL (or raises) at step STEP. --events F: what happened (restores, commits, every step), one
JSON object a line, from rank 0 (and the failing rank).

Each rank trains on its own shard of every global batch. In the backward pass each layer's
gradient goes to DistributedOptimizer.grad_ready the moment it is computed, so its all-reduce
overlaps the backward pass of the layers below it. Rank 0 shows progress and the test accuracy.
"""
import argparse
import hashlib
import json
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")     # the ranks already fill the cores
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import hvlite as hvd  # noqa: E402
from hvlite.optim import (SGD, Adam, DistributedOptimizer, broadcast_optimizer_state,  # noqa: E402
                          broadcast_parameters, scaled_lr, warmup_lr)


def load_data(seed=0):
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = len(x) // 5
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


class MLP:
    """x -> Linear -> ReLU -> Linear -> ReLU -> Linear -> softmax cross-entropy."""

    def __init__(self, sizes=(64, 128, 64, 10), seed=0):
        rng = np.random.default_rng(seed)
        self.params = {}
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            self.params[f"layer{i}.w"] = (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
            self.params[f"layer{i}.b"] = np.zeros(b, np.float32)
        self.layers = len(sizes) - 1

    def forward(self, x):
        acts = [x]
        for i in range(self.layers):
            z = acts[-1] @ self.params[f"layer{i}.w"] + self.params[f"layer{i}.b"]
            acts.append(np.maximum(z, 0) if i < self.layers - 1 else z)
        return acts

    def loss_and_backward(self, x, y, on_grad):
        """Mean cross-entropy over the batch; calls on_grad(name, grad) last layer first."""
        acts = self.forward(x)
        logits = acts[-1] - acts[-1].max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
        d = p
        d[np.arange(len(y)), y] -= 1
        d /= len(y)
        for i in reversed(range(self.layers)):
            on_grad(f"layer{i}.w", acts[i].T @ d)
            on_grad(f"layer{i}.b", d.sum(axis=0))
            if i:
                d = (d @ self.params[f"layer{i}.w"].T) * (acts[i] > 0)
        return loss

    def accuracy(self, x, y):
        return float((self.forward(x)[-1].argmax(axis=1) == y).mean())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch", type=int, default=64, help="global batch size")
    p.add_argument("--lr", type=float, default=0.05, help="learning rate for one rank (scaled by N)")
    p.add_argument("--op", choices=("average", "adasum"), default="average",
                   help="combine gradients by averaging, or updates by Adasum")
    p.add_argument("--lr-scale", type=float, default=None,
                   help="multiply --lr by this (default: N for average, 1 for adasum)")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--timeline", default=None, help="write a Chrome trace here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--momentum", type=float, default=None,
                   help="SGD momentum (default 0.9; async and ssp: 0.5, as staleness adds its own)")
    p.add_argument("--mode", choices=("allreduce", "ps-sync", "ps-async", "ssp"), default="allreduce")
    p.add_argument("--staleness", type=int, default=None, help="ssp's bound k")
    p.add_argument("--servers", type=int, default=None, help="server ranks (HVLITE_PS_SERVERS, else 1)")
    p.add_argument("--slow-rank", type=int, default=-1, help="this rank is a straggler")
    p.add_argument("--slow-factor", type=float, default=1.0, help="its steps take F times longer")
    p.add_argument("--straggler", choices=("none", "persistent", "transient"), default=None,
                   help="persistent if --slow-rank is given, else none")
    p.add_argument("--straggle-prob", type=float, default=0.1, help="transient: chance per step")
    p.add_argument("--compute-ms", type=float, default=0.0,
                   help="simulated compute per step (a sleep before the forward pass)")
    p.add_argument("--eval-every", type=int, default=0, help="rank 0 records test accuracy every K steps")
    p.add_argument("--json", default=None, help="rank 0 writes a summary (and the curve) here")
    p.add_argument("--elastic", action="store_true",
                   help="train under hvlite.elastic (launch with hvliterun --elastic)")
    p.add_argument("--commit-every", type=int, default=20, help="--elastic: steps per commit")
    p.add_argument("--fail-at", default=None, metavar="STEP:RANK[:raise]",
                   help="--elastic: on the first launch, rank RANK fails at step STEP")
    p.add_argument("--events", default=None, help="--elastic: a JSON-lines log of what happened")
    p.add_argument("--hold-at", type=int, default=-1, metavar="STEP",
                   help="--elastic: on the first launch, after the commit at step STEP, wait "
                        "(60 s at most) until hvliterun posts new hosts or ends the launch")
    args = p.parse_args(argv)
    if args.straggler is None:
        args.straggler = "persistent" if args.slow_rank >= 0 else "none"
    elif args.straggler == "persistent" and args.slow_rank < 0:
        args.slow_rank = 1
    if not 0 <= args.straggle_prob <= 1 or args.compute_ms < 0 or args.slow_factor < 1:
        p.error("need 0 <= --straggle-prob <= 1, --compute-ms >= 0 and --slow-factor >= 1")
    if args.mode != "allreduce":
        return main_ps(args)
    if args.elastic:
        return main_elastic(args)
    if args.fail_at or args.events or args.hold_at >= 0:
        p.error("--fail-at, --events and --hold-at go with --elastic")

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    (xtr, ytr), (xte, yte) = load_data()
    model = MLP(seed=args.seed + rank)                # different on purpose: broadcast fixes it
    broadcast_parameters(model.params, root_rank=0)
    scale = args.lr_scale if args.lr_scale is not None else (size if args.op == "average" else 1)
    target_lr = scaled_lr(args.lr, scale)
    base = SGD(target_lr, momentum=0.9 if args.momentum is None else args.momentum) \
        if args.optimizer == "sgd" else Adam(target_lr / 50)
    opt = DistributedOptimizer(base, model.params,
                               op=hvd.Adasum if args.op == "adasum" else hvd.Average)
    broadcast_optimizer_state(base, root_rank=0)
    if args.timeline:
        hvd.start_timeline(args.timeline)

    per_rank = args.batch // size
    steps_per_epoch = len(xtr) // args.batch
    progress = None
    if rank == 0:
        try:
            from tqdm import tqdm
            progress = tqdm(total=args.epochs * steps_per_epoch, desc="train", unit="step")
        except ImportError:
            pass
    t0, step, curve = time.perf_counter(), 0, []
    lag = Straggler(args, rank)
    rng = np.random.default_rng(args.seed)             # same order on every rank
    for epoch in range(args.epochs):
        order = rng.permutation(len(xtr))
        for s in range(steps_per_epoch):
            idx = order[s * args.batch:(s + 1) * args.batch][rank * per_rank:(rank + 1) * per_rank]
            opt.lr = warmup_lr(step, target_lr / scale, target_lr, args.warmup_steps) \
                if args.optimizer == "sgd" else opt.lr
            with hvd.timeline.span("forward+backward"):
                lag.begin()
                loss = model.loss_and_backward(xtr[idx], ytr[idx], opt.grad_ready)
                lag.end()
            opt.step()                                # marks its own update on the timeline
            step += 1
            if rank == 0 and args.eval_every and step % args.eval_every == 0:
                curve.append((time.perf_counter() - t0, step, model.accuracy(xte, yte)))
            if progress is not None:
                progress.set_postfix(epoch=epoch, loss=f"{loss:.3f}", refresh=False)
                progress.update()
    if progress is not None:
        progress.close()
    if args.timeline:
        hvd.stop_timeline()
    acc = model.accuracy(xte, yte)
    same = len(set(hvd.allgather_object(digest(model.params)))) == 1
    elapsed = max(hvd.allgather_object(time.perf_counter() - t0))
    lags = hvd.allgather_object(lag.record())
    if rank == 0:
        print(f"ranks {size}, op {args.op}, lr {target_lr:g}, {step} steps in {elapsed:.1f} s; "
              f"test accuracy {acc:.1%}; parameters identical on every rank: {same}", flush=True)
        write_summary(args, size, size, elapsed, step * args.batch, acc, curve, None, lags)
    hvd.shutdown()
    return acc


def digest(params):
    return hashlib.sha1(b"".join(params[n].tobytes() for n in sorted(params))).hexdigest()


class Events:
    """--events: one JSON object a line, appended and flushed at once (a killed rank's last
    line is on disk); a no-op without a file."""

    def __init__(self, path, on):
        self.f = open(path, "a") if path and on else None

    def __call__(self, event, **fields):
        if self.f is not None:
            self.f.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
            self.f.flush()


def hold_for_discovery(state, log, seconds=60.0, poll=0.05):
    """--hold-at: stay at this commit until hvliterun acts on what discovery shows, so that a
    change of hosts is seen mid-run however fast the machine trains: new hosts raise
    HostsUpdatedInterrupt here on every rank (as at a commit); hosts gone end the launch. The
    ranks poll together (the same number of all-reduces everywhere), so none leaves early."""
    log("hold", launch=0, step=state.step)
    for _ in range(int(seconds / poll)):
        state.check_host_updates()
        time.sleep(poll)


def main_elastic(args):
    """The allreduce mode under hvlite.elastic: state.step counts the updates applied, and
    everything else (epoch, batch, learning rate) is computed from it, so a job resumed from a
    commit applies each step exactly once."""
    import signal
    hvd.init()
    (xtr, ytr), (xte, yte) = load_data()
    model = MLP(seed=args.seed)
    base = SGD(args.lr, momentum=0.9 if args.momentum is None else args.momentum) \
        if args.optimizer == "sgd" else Adam(args.lr / 50)
    state = hvd.elastic.NumpyState(model.params, base, step=0)
    steps_per_epoch = len(xtr) // args.batch
    total = args.epochs * steps_per_epoch
    fail_step, fail_rank, fail_how = (args.fail_at.split(":") + ["kill"])[:3] if args.fail_at \
        else (-1, -1, None)
    fail_step, fail_rank = int(fail_step), int(fail_rank)
    launch = hvd.elastic.restarts() or 0

    @hvd.elastic.run
    def train(state):
        rank, size = hvd.rank(), hvd.size()
        log = Events(args.events, rank == 0)
        scale = args.lr_scale if args.lr_scale is not None else (size if args.op == "average" else 1)
        target_lr = scaled_lr(args.lr, scale)
        opt = DistributedOptimizer(base, model.params,
                                   op=hvd.Adasum if args.op == "adasum" else hvd.Average)
        per_rank = args.batch // size
        log("restore", launch=launch, size=size, step=state.step, commit=state.commit_id,
            digest=digest(model.params), cause=os.environ.get("HVLITE_ELASTIC_CAUSE") or None)
        while state.step < total:
            epoch, s = divmod(state.step, steps_per_epoch)
            order = np.random.default_rng([args.seed, epoch]).permutation(len(xtr))
            idx = order[s * args.batch:(s + 1) * args.batch][rank * per_rank:(rank + 1) * per_rank]
            if state.step == fail_step and rank == fail_rank and launch == 0:
                Events(args.events, True)("fail", launch=launch, rank=rank, step=state.step,
                                          how=fail_how)
                if fail_how == "raise":
                    raise RuntimeError(f"rank {rank} fails on purpose at step {state.step} (--fail-at)")
                os.kill(os.getpid(), signal.SIGKILL)
            opt.lr = warmup_lr(state.step, target_lr / scale, target_lr, args.warmup_steps) \
                if args.optimizer == "sgd" else target_lr / 50
            model.loss_and_backward(xtr[idx], ytr[idx], opt.grad_ready)
            opt.step()
            log("step", launch=launch, step=state.step)
            state.step += 1
            if state.step % args.commit_every == 0 or state.step == total:
                state.commit()
                log("commit", launch=launch, step=state.step, commit=state.commit_id,
                    digest=digest(model.params))
                if state.step == args.hold_at and launch == 0:
                    hold_for_discovery(state, log)

    t0 = time.perf_counter()
    train(state)
    rank, size = hvd.rank(), hvd.size()
    acc = model.accuracy(xte, yte)
    same = len(set(hvd.allgather_object(digest(model.params)))) == 1
    elapsed = max(hvd.allgather_object(time.perf_counter() - t0))
    if rank == 0:
        Events(args.events, True)("done", launch=launch, size=size, step=state.step, accuracy=acc)
        print(f"ranks {size}, elastic, launch {launch}, {state.step} steps ({total} in all) in "
              f"{elapsed:.1f} s this launch; test accuracy {acc:.1%}; parameters identical on "
              f"every rank: {same}", flush=True)
    hvd.shutdown()
    return acc


class Straggler:
    """One worker's compute per step: --compute-ms (else the real compute), times F when slow.

    Transient slow steps come from a stream seeded by (--seed, rank), one draw per step, so the
    schedule depends on nothing but the step count: every mode sees the same delays. busy_s is
    the time the worker spent computing (or sleeping as if it did), which no mode can save; the
    rest of a run is synchronisation and transfer.
    """

    def __init__(self, args, rank):
        self.kind, self.factor, self.prob = args.straggler, args.slow_factor, args.straggle_prob
        self.compute = args.compute_ms / 1000.0
        self.persistent = self.kind == "persistent" and rank == args.slow_rank
        self.rng = np.random.default_rng([args.seed, 7919, rank])
        self.step, self.slow, self.delayed, self.busy = 0, False, [], 0.0

    def begin(self):
        """Before the forward pass: decide this step, then sleep the simulated compute."""
        self.t = time.perf_counter()
        draw = self.rng.random()                      # drawn every step: the schedule is fixed
        self.slow = self.factor > 1 and (self.persistent or (self.kind == "transient" and draw < self.prob))
        if self.slow:
            self.delayed.append(self.step)
        if self.compute:                              # a slow step's gradients come late
            time.sleep(self.compute * (self.factor if self.slow else 1))

    def end(self):
        """After the backward pass: without --compute-ms, a slow step sleeps (F-1) times it."""
        if self.slow and not self.compute:
            time.sleep((self.factor - 1) * (time.perf_counter() - self.t))
        self.busy += time.perf_counter() - self.t
        self.step += 1

    def record(self):
        return {"delayed_steps": self.delayed, "busy_s": self.busy}


def write_summary(args, size, workers, elapsed, samples, acc, curve, stats, lags):
    if not args.json:
        return
    out = {"mode": args.mode, "op": getattr(args, "op", "average"), "staleness": args.staleness, "ranks": size, "workers": workers,
           "slow_rank": args.slow_rank, "slow_factor": args.slow_factor, "seconds": elapsed,
           "samples_per_s": samples / elapsed, "accuracy": acc, "curve": curve,
           "straggler": args.straggler, "straggle_prob": args.straggle_prob,
           "compute_ms": args.compute_ms, "delayed_steps": [lag["delayed_steps"] for lag in lags],
           "busy_s": [lag["busy_s"] for lag in lags]}
    if stats is not None:
        out["staleness_hist"] = {str(k): v for k, v in stats["staleness"].items()}
        out["pull_wait_s"] = stats["pull_wait_s"]
    with open(args.json, "w") as f:
        json.dump(out, f)


def main_ps(args):
    """The same model and data through hvlite.ps: workers pull, compute, push; servers update."""
    import hvlite.ps as ps
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    (xtr, ytr), (xte, yte) = load_data()
    model = MLP(seed=args.seed)                       # worker 0's values initialise the servers
    mode = {"ps-sync": "sync", "ps-async": "async", "ssp": "ssp"}[args.mode]
    servers = args.servers
    from hvlite import config
    n_servers = servers or config.load().ps_servers or 1
    workers = max(size - n_servers, 1)
    target_lr = scaled_lr(args.lr, workers)
    momentum = args.momentum if args.momentum is not None else (0.9 if mode == "sync" else 0.5)
    base = SGD(target_lr, momentum=momentum) if args.optimizer == "sgd" else Adam(target_lr / 50)
    job = ps.init(model.params, base, mode=mode, staleness=args.staleness, servers=servers)
    if args.timeline:
        hvd.start_timeline(args.timeline)
    per_rank = args.batch // workers
    steps_per_epoch = len(xtr) // args.batch
    t0, step, curve = time.perf_counter(), 0, []
    lag = Straggler(args, rank)
    if job.is_server:
        stats = job.serve()
    else:
        rng = np.random.default_rng(args.seed)
        for epoch in range(args.epochs):
            order = rng.permutation(len(xtr))
            for s in range(steps_per_epoch):
                idx = order[s * args.batch:(s + 1) * args.batch][rank * per_rank:(rank + 1) * per_rank]
                job.pull()
                grads = {}
                with hvd.timeline.span("forward+backward"):
                    lag.begin()
                    model.loss_and_backward(xtr[idx], ytr[idx], grads.__setitem__)
                    lag.end()
                job.push(grads)
                step += 1
                if rank == 0 and args.eval_every and step % args.eval_every == 0:
                    curve.append((time.perf_counter() - t0, step, model.accuracy(xte, yte)))
        stats = job.close()                           # the servers' final parameters
    if args.timeline:
        hvd.stop_timeline()
    elapsed = max(hvd.allgather_object(time.perf_counter() - t0))
    lags = [r for r in hvd.allgather_object(None if job.is_server else lag.record()) if r is not None]
    acc = model.accuracy(xte, yte)
    digests = hvd.allgather_object(None if job.is_server else hashlib.sha1(
        b"".join(model.params[n].tobytes() for n in sorted(model.params))).hexdigest())
    same = len({d for d in digests if d is not None}) == 1
    if rank == 0:
        hist = ", ".join(f"{k}: {v}" for k, v in stats["staleness"].items())
        print(f"ranks {size} ({workers} workers, {size - workers} servers, {mode}"
              f"{'' if mode != 'ssp' else f' k={args.staleness}'}), {step} steps per worker in "
              f"{elapsed:.1f} s; test accuracy {acc:.1%}; parameters identical on every worker: "
              f"{same}; staleness histogram {{{hist}}}", flush=True)
        write_summary(args, size, workers, elapsed, sum(stats["steps"]) * per_rank, acc, curve, stats,
                      lags)
    hvd.shutdown()
    return acc


if __name__ == "__main__":
    main()
