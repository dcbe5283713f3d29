"""Rank side of the fuzzer: every rank draws the same random sequence of collectives from a seed
(tests/fuzz/fuzzlib.py) and runs it, checking each result against NumPy on every rank's rebuilt
input and comparing result bits across the ranks.

    mpiexec -n 3 python tests/fuzz/mpi_fuzz.py --seeds 1-20 --ops 200
    mpiexec -n 3 python tests/fuzz/mpi_fuzz.py --seed 7 --only 42     # replay one op
    mpiexec -n 3 python tests/fuzz/mpi_fuzz.py --seed 7 --ops 43      # replay ops 0..42

Ops come in batches: a sync op runs where it stands; the async ones' handles are synchronized
at the end of the batch in a random order of each rank's own (every rank has submitted
everything by then, so no rank waits for a step another submits later), or now and then
dropped unsynchronized. Ops on a process set
are run by its members only. Each rank ends with one line,
`FUZZ rank=R seeds=S ops=K ran=J mismatches=M` (M: failing ops of the whole job, the same on
every rank), and exits 1 when M > 0. A watchdog turns a hang into `HANG ...`, the stacks of
every thread and exit 3.
"""
import argparse
import faulthandler
import os
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzzlib  # noqa: E402

import hvlite as hvd  # noqa: E402
from hvlite.config import ALGORITHMS  # noqa: E402

DOCUMENTED_ALGORITHMS = ["ring", "rhd", "rd", "tree", "hierarchical", "shm", "mpi", "auto"]
MAX_PRINTED = 20


def parse_seeds(text):
    """'1-5,9' -> [1, 2, 3, 4, 5, 9]."""
    seeds = []
    for part in str(text).split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return seeds


def process_sets(n):
    """The sets the plan may use: the global one, then the first n-1 ranks, the odd ranks and
    the two ends (none empty, none twice, none the whole job)."""
    out = [list(range(n))]
    for ranks in (list(range(n - 1)), list(range(1, n, 2)), sorted({0, n - 1})):
        if ranks and ranks not in out:
            out.append(ranks)
    return out


class Fuzzer:
    def __init__(self, args):
        self.args = args
        self.rank, self.n = hvd.rank(), hvd.size()
        self.sets = process_sets(self.n)
        self.psets = [hvd.global_process_set] + [hvd.add_process_set(r) for r in self.sets[1:]]
        assert sorted(ALGORITHMS) == sorted(DOCUMENTED_ALGORITHMS), ALGORITHMS
        usable = [a for a in DOCUMENTED_ALGORITHMS
                  if a != "shm" or hvd._current().shm_info["available"]]   # agreed at init
        self.algorithms = usable + [None]
        self.ops = self.ran = 0
        self.bad = []                   # (seed, op index, text)
        self.last, self.where = time.monotonic(), "init"

    # -- bookkeeping -----------------------------------------------------------------------------

    def at(self, where):
        self.last, self.where = time.monotonic(), where

    def report(self, seed, op, problem):
        self.bad.append((seed, op["i"]))
        if len(self.bad) <= MAX_PRINTED:
            print(f"MISMATCH seed={seed} op={op['i']} rank={self.rank}: "
                  f"{fuzzlib.describe(op, self.sets)} :: {problem} (replay: mpiexec -n {self.n} "
                  f"python tests/fuzz/mpi_fuzz.py --seed {seed} --only {op['i']})", flush=True)

    def watchdog(self):
        while True:
            time.sleep(1.0)
            if time.monotonic() - self.last > self.args.watchdog:
                print(f"HANG rank={self.rank} {self.where}: no progress for "
                      f"{self.args.watchdog:.0f}s; every thread's stack:", flush=True)
                faulthandler.dump_traceback(all_threads=True)
                sys.stdout.flush()
                os._exit(3)

    # -- one op ----------------------------------------------------------------------------------

    def start(self, seed, op):
        """Submit `op` on this rank: (handle or None, result when sync, what to check after)."""
        ps = self.psets[op["set"]]
        kind, name, sync = op["kind"], op["name"], op["mode"] == "sync"
        red = hvd.ReduceOp(op["op"]) if "op" in op else None
        me = self.rank
        p = self.sets[op["set"]].index(me)
        after = {}

        def arr(part=0, how=None):
            x = fuzzlib.layout(fuzzlib.rank_input(seed, op, me, part, self.sets),
                               how or op.get("layout", "c"))
            after.setdefault("inputs", []).append((x, x.copy()))
            return x

        if kind == "barrier":
            return (None, hvd.barrier(ps), after) if sync else (hvd.barrier_async(ps), None, after)
        if kind in ("broadcast_object", "allgather_object"):
            obj = fuzzlib.rank_object(seed, op, me)
            if kind == "broadcast_object":
                f = hvd.broadcast_object if sync else hvd.broadcast_object_async
                call = lambda: f(obj, op["root"], name=name, process_set=ps)  # noqa: E731
            else:
                f = hvd.allgather_object if sync else hvd.allgather_object_async
                call = lambda: f(obj, name=name, process_set=ps)  # noqa: E731
        elif kind == "allreduce":
            x = arr()
            f = hvd.allreduce if sync else hvd.allreduce_async
            call = lambda: f(x, op=red, name=name, algorithm=op["algorithm"],  # noqa: E731
                             process_set=ps)
        elif kind == "allreduce_":
            x = arr()
            after["inplace"] = after.pop("inputs")[0][0]
            f = hvd.allreduce_ if sync else hvd.allreduce_async_
            call = lambda: f(x, op=red, name=name, algorithm=op["algorithm"],  # noqa: E731
                             process_set=ps)
        elif kind == "grouped":
            xs = [arr(j, part["layout"]) for j, part in enumerate(op["parts"])]
            f = hvd.grouped_allreduce if sync else hvd.grouped_allreduce_async
            call = lambda: f(xs, op=red, name=name, algorithm=op["algorithm"],  # noqa: E731
                             process_set=ps)
        elif kind == "allgather":
            x = arr()
            f = hvd.allgather if sync else hvd.allgather_async
            call = lambda: f(x, name=name, process_set=ps)  # noqa: E731
        elif kind == "broadcast":
            x = arr()
            f = hvd.broadcast if sync else hvd.broadcast_async
            call = lambda: f(x, op["root"], name=name, process_set=ps)  # noqa: E731
        elif kind == "broadcast_":
            x = arr()
            after["inplace"] = after.pop("inputs")[0][0]
            f = hvd.broadcast_ if sync else hvd.broadcast_async_
            call = lambda: f(x, op["root"], name=name, process_set=ps)  # noqa: E731
        elif kind == "alltoall":
            x = arr()
            splits = None if op["splits"] is None else op["splits"][p]
            f = hvd.alltoall if sync else hvd.alltoall_async
            call = lambda: f(x, splits=splits, name=name, process_set=ps)  # noqa: E731
        elif kind == "reducescatter":
            x = arr()
            f = hvd.reducescatter if sync else hvd.reducescatter_async
            call = lambda: f(x, op=red, name=name, process_set=ps)  # noqa: E731
        else:
            raise ValueError(kind)
        return (None, call(), after) if sync else (call(), None, after)

    def finish(self, handle, rng):
        """A handle's result, by one of the documented ways of waiting for it."""
        how = int(rng.integers(5))
        if how == 0:
            return handle.synchronize()
        if how == 1:
            return hvd.synchronize(handle)
        if how == 2:
            while not hvd.poll(handle):
                time.sleep(0.0005)
            return handle.result()
        if how == 3:
            handle.wait()
            return handle.result()
        return handle()

    def check(self, seed, op, got, after):
        problems = fuzzlib.check(seed, op, self.sets, self.rank, got)
        if "inplace" in after:
            x = after["inplace"]
            if got is not x:
                problems.append(f"in place: returned {type(got).__name__} {id(got)}, not the "
                                "input array")
            else:
                problems += [f"the input array after the call: {p}" for p in
                             fuzzlib.check(seed, op, self.sets, self.rank, x)]
        for j, (x, before) in enumerate(after.get("inputs", [])):
            if x.tobytes() != before.tobytes():
                problems.append(f"input {j} was modified by an out-of-place call")
        return problems

    # -- a batch and a seed ----------------------------------------------------------------------

    def run_batch(self, seed, batch, digests):
        pending = []
        for op in batch:
            self.ops += 1
            if self.rank not in self.sets[op["set"]]:
                continue
            self.ran += 1
            self.at(f"seed={seed} op={op['i']} (submitting)")
            if (self.args.inject == f"stall:{op['i']}" and
                    self.rank == min(self.sets[op["set"]])):
                time.sleep(1e6)                 # proves that a hang is reported
            if self.args.verbose:
                print(f"rank {self.rank}: {fuzzlib.describe(op, self.sets)}", flush=True)
            try:
                handle, got, after = self.start(seed, op)
            except Exception as e:  # noqa: BLE001 - a documented call that raised
                self.report(seed, op, f"raised {type(e).__name__}: {e}")
                continue
            if handle is None:
                self.settle(seed, op, got, after, digests)
            elif op["mode"] == "drop":
                del handle      # documented as safe; only a crash or a hang can tell here
            else:
                pending.append((op, handle, after))
        rng = np.random.default_rng([seed, batch[0]["i"], self.rank, 0x0DE7])
        order = rng.permutation(len(pending))
        for k in order:
            op, handle, after = pending[k]
            self.at(f"seed={seed} op={op['i']} (synchronizing, in this rank's order "
                    f"{[pending[j][0]['i'] for j in order]})")
            try:
                got = self.finish(handle, rng)
            except Exception as e:  # noqa: BLE001
                self.report(seed, op, f"raised {type(e).__name__}: {e}")
                continue
            self.settle(seed, op, got, after, digests)
            if rng.random() < 0.1:      # a handle settles once: asking again gives the same
                try:
                    again = handle.synchronize()
                    problems = [f"synchronized again: {p}" for p in
                                fuzzlib.check(seed, op, self.sets, self.rank, again)]
                except Exception as e:  # noqa: BLE001
                    problems = [f"synchronized again: raised {type(e).__name__}: {e}"]
                for problem in problems[:1]:
                    self.report(seed, op, problem)

    def settle(self, seed, op, got, after, digests):
        what, _, at = (self.args.inject or "").partition(":")
        if what == "corrupt" and int(at) == op["i"] and self.rank == max(self.sets[op["set"]]):
            got = fuzzlib.corrupt(op, got)      # proves that a wrong result is reported
        try:
            problems = self.check(seed, op, got, after)
        except Exception as e:  # noqa: BLE001 - the checker must never hide a result
            problems = [f"checking raised {type(e).__name__}: {e}"]
        for problem in problems[:3]:
            self.report(seed, op, problem)
        if fuzzlib.same_everywhere(op):     # compared even when wrong here: says where
            try:
                digests[op["i"]] = fuzzlib.digest(got)
            except Exception as e:  # noqa: BLE001 - not an array or a list of them
                self.report(seed, op, f"no digest of a {type(got).__name__}: {e}")

    def run_seed(self, seed):
        count = max(self.args.ops, (self.args.only + 1) if self.args.only is not None else 0)
        plan = fuzzlib.draw_plan(seed, count, self.sets, self.algorithms)
        for batch in plan:
            if self.args.only is not None:
                batch = [op for op in batch if op["i"] == self.args.only]
                if not batch:
                    continue
            digests = {}
            self.run_batch(seed, batch, digests)
            self.at(f"seed={seed} cross-rank check after op {batch[-1]['i']}")
            everyone = MPI.COMM_WORLD.allgather(digests)
            shared = {op["i"]: op for op in batch if fuzzlib.same_everywhere(op)}
            for i, problem in fuzzlib.cross_rank_problems(everyone, self.sets, shared):
                if self.rank == min(self.sets[shared[i]["set"]]):
                    self.report(seed, shared[i], problem)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default=None, help="e.g. 1-20 or 3,5,8")
    ap.add_argument("--seed", type=int, default=None, help="one seed (with --only to replay)")
    ap.add_argument("--ops", type=int, default=200, help="ops per seed")
    ap.add_argument("--only", type=int, default=None, help="run only this op of the seed")
    ap.add_argument("--watchdog", type=float, default=120.0,
                    help="seconds without progress before reporting a hang")
    ap.add_argument("--progress", action="store_true", help="rank 0: a line per seed")
    ap.add_argument("--verbose", action="store_true", help="every op, before it runs")
    ap.add_argument("--inject", default=None,
                    help="corrupt:I (the set's last rank sees a wrong result of op I) or stall:I "
                         "(the set's first rank stops before op I): the fuzzer's own tests")
    args = ap.parse_args(argv)
    text = args.seeds if args.seeds is not None else (
        str(args.seed) if args.seed is not None else os.environ.get("FUZZ_SEEDS", "1"))
    seeds = parse_seeds(text)

    hvd.init(process_sets="dynamic")
    fz = Fuzzer(args)
    threading.Thread(target=fz.watchdog, daemon=True, name="fuzz-watchdog").start()
    t0 = time.monotonic()
    for seed in seeds:
        fz.run_seed(seed)
        if args.progress and fz.rank == 0:
            print(f"fuzz: seed {seed} done, {fz.ops} ops, {time.monotonic() - t0:.1f}s",
                  flush=True)
    fz.at("final tally")
    everyone = MPI.COMM_WORLD.allgather(sorted(set(fz.bad)))
    mismatches = len({b for bad in everyone for b in bad})
    print(f"FUZZ rank={fz.rank} seeds={text} ops={fz.ops} ran={fz.ran} "
          f"mismatches={mismatches} seconds={time.monotonic() - t0:.1f}", flush=True)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
