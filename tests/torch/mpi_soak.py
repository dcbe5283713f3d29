"""Rank side (a plain script): one long-lived process per rank, as a Horovod test harness runs
it. Four lives of hvlite (init, then three shutdown/re-init cycles), each a few hundred mixed
operations: torch and NumPy collectives (named and unnamed, sync and async, dropped handles),
optimizer steps, process sets added and removed, and deliberate errors (mismatches, bad
arguments, names in flight, use after removal). Each result is checked against what every rank
computes locally; at the end a final collective must be bit-identical on every rank and the
resident memory of the last lives must stay within a bound of the first's. Then, in the same
process, the Horovod behaviours users rely on: join's Average and refusals, the callable sparse
handle, `_parameter_names`, the warning after synchronize(), broadcast_optimizer_state of a fresh
optimizer, and a 0-d reducescatter refused.

Prints `SOAK rank=R ops=K rss_mb=[...]` and exits 1 on the first failure (after saying why)."""
import os
import sys
import warnings

import numpy as np
import torch

import hvlite as hvd_np
import hvlite.torch as hvd

OPS_PER_LIFE = int(os.environ.get("SOAK_OPS", "100"))
LIVES = 4
ops = 0


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def check(ok, what):
    if not ok:
        print(f"SOAK-FAIL rank={hvd_np.rank()} op={ops}: {what}", flush=True)
        sys.exit(1)


def expect_error(fn, kind, what):
    global ops
    ops += 1
    try:
        fn()
    except kind:
        return
    except Exception as e:  # noqa: BLE001 - any other kind is the failure
        check(False, f"{what}: raised {type(e).__name__}: {e}, expected {kind.__name__}")
    check(False, f"{what}: no error, expected {kind.__name__}")


def life(number, rng):
    global ops
    hvd.init(process_sets="dynamic")
    r, n = hvd.rank(), hvd.size()
    torch.manual_seed(number)
    model = torch.nn.Linear(8, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    done = 0
    while done < OPS_PER_LIFE:
        kind = rng.integers(0, 10)         # the same sequence on every rank
        size = int(rng.integers(0, 300))
        if kind == 0:                      # torch allreduce, named or not, sync or async
            t = torch.arange(size, dtype=torch.float32) + r
            want = torch.arange(size, dtype=torch.float32) * n + sum(range(n))
            if rng.integers(0, 2):
                got = hvd.allreduce(t, op=hvd.Sum, name=None if rng.integers(0, 2) else f"t{done}")
            else:
                got = hvd.synchronize(hvd.allreduce_async(t, op=hvd.Sum))
            check(torch.equal(got, want), f"torch allreduce of {size}")
        elif kind == 1:                    # NumPy allgather of ragged rows
            got = hvd_np.allgather(np.full((r + 1, 2), r, np.int64))
            want = np.concatenate([np.full((k + 1, 2), k, np.int64) for k in range(n)])
            check(np.array_equal(got, want), "numpy allgather")
        elif kind == 2:                    # optimizer steps
            for _ in range(2):
                opt.zero_grad()
                model(torch.randn(4, 8, generator=torch.Generator().manual_seed(r))).sum().backward()
                opt.step()
            p = next(model.parameters()).detach().numpy().copy()
            check(np.array_equal(hvd_np.broadcast(p, 0), p), "replicas diverged after steps")
        elif kind == 3:                    # a process set: add, use, remove, use after removal
            ps = hvd.add_process_set([k for k in range(n) if k != n - 1] or [0])
            if r in ps.ranks:
                got = hvd_np.allreduce(np.ones(3), op=hvd_np.Sum, process_set=ps)
                check(np.all(got == len(ps.ranks)), "allreduce on a process set")
            hvd.remove_process_set(ps)
            expect_error(lambda: hvd_np.allreduce(np.ones(1), process_set=ps), hvd_np.HvliteError,
                         "use after removal")
        elif kind == 4:                    # a mismatch, on every rank
            x = np.ones(3 if r == 0 else 4)
            expect_error(lambda: hvd_np.allreduce(x, name=f"mm{done}"), hvd_np.MismatchError,
                         "shape mismatch")
        elif kind == 5:                    # a bad argument on every rank
            expect_error(lambda: hvd_np.broadcast(np.ones(2), root_rank=n + 3), hvd_np.HvliteError,
                         "bad root")
        elif kind == 6:                    # dropped handles, then a call behind them
            for k in range(5):
                hvd_np.allreduce_async(np.ones(7), name=f"drop{done}.{k}")
            got = hvd_np.allreduce(np.ones(7), op=hvd_np.Sum, name=f"after{done}")
            check(np.all(got == n), "after dropped handles")
        elif kind == 7:                    # a name in flight: the others submit it only later
            name = f"inflight{done}"
            if r == 0:
                h = hvd_np.allreduce_async(np.ones(2), op=hvd_np.Sum, name=name)
                expect_error(lambda: hvd_np.allreduce_async(np.ones(2), name=name),
                             hvd_np.InvalidArgumentError, "name in flight")
                hvd_np.barrier()
            else:
                hvd_np.barrier()
                h = hvd_np.allreduce_async(np.ones(2), op=hvd_np.Sum, name=name)
                ops += 1
            check(np.all(h.synchronize() == n), "after a name in flight")
        elif kind == 8:                    # objects and grouped calls
            got = hvd.broadcast_object({"life": number, "from": r}, root_rank=n - 1)
            check(got == {"life": number, "from": n - 1}, "broadcast_object")
            g = hvd.grouped_allreduce([torch.ones(3) * r, torch.ones(size % 5)], op=hvd.Sum)
            check(torch.equal(g[0], torch.ones(3) * sum(range(n))), "grouped allreduce")
        else:                              # reducescatter and alltoall
            got = hvd_np.reducescatter(np.ones((2 * n, 3)), op=hvd_np.Sum)
            check(got.shape == (2, 3) and np.all(got == n), "reducescatter")
            got = hvd_np.alltoall(np.arange(n, dtype=np.int32) + 10 * r)
            check(np.array_equal(got, np.arange(n, dtype=np.int32) * 10 + r), "alltoall")
        done += 1
        ops += 1
    hvd.shutdown()


def horovod_behaviours():
    """After all of the above, in the same process: what Horovod scripts rely on."""
    global ops
    r, n = hvd.rank(), hvd.size()
    model = torch.nn.Linear(3, 1)
    names = dict(model.named_parameters())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    check(opt._parameter_names == {p: k for k, p in names.items()}, "_parameter_names")
    model(torch.ones(2, 3)).sum().backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        opt.step()
    check([x.category for x in w] == [UserWarning] and "skip_synchronize()" in str(w[0].message),
          f"the warning after synchronize(): {[str(x.message) for x in w]}")
    fresh = torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    hvd.broadcast_optimizer_state(fresh, root_rank=0)          # no gradients, no state yet
    sparse = torch.sparse_coo_tensor([[r % 4]], [float(r + 1)], (4,), check_invariants=True)
    got = hvd.sparse_allreduce_async(sparse, name="soak.sparse", op=hvd.Sum)()
    want = torch.zeros(4)
    for k in range(n):
        want[k % 4] += k + 1
    check(torch.equal(got.to_dense(), want), f"sparse handle: {got}")
    expect_error(lambda: hvd.reducescatter(torch.tensor(1.0), name="soak.rs0"), hvd_np.HvliteError,
                 "0-d reducescatter")
    if n > 1:
        if r == n - 1:
            last = hvd.join()
        else:
            avg = hvd.allreduce(torch.full((2,), 6.0), name="soak.join.avg")
            check(avg.tolist() == [6.0 * (n - 1) / n] * 2, f"Average with a joined rank: {avg}")
            try:
                hvd.allgather(torch.ones(1, 2), name="soak.join.g")
                check(False, "allgather ran with a joined rank")
            except hvd_np.MismatchError as e:
                check(f"(rank {n - 1} joined)" in str(e), f"allgather with a joined rank: {e}")
            last = hvd.join()
        check(last in range(n - 1), f"join returned {last}")
    ops += 6


def main():
    rng = np.random.default_rng(2024)
    rss = []
    for number in range(LIVES):
        life(number, rng)
        rss.append(round(rss_mb(), 1))
    hvd.init()
    horovod_behaviours()
    final = hvd_np.allreduce(np.linspace(-1, 1, 1001, dtype=np.float32) * (hvd.rank() + 1.5))
    digests = hvd_np.allgather_object(final.tobytes())
    check(all(d == digests[0] for d in digests), "final allreduce differs between ranks")
    # the first life pays for imports and first-touch allocations; the later ones must not grow
    check(rss[-1] - rss[1] < 60, f"resident memory grew: {rss} MB")
    os.write(1, f"SOAK rank={hvd.rank()} ops={ops} rss_mb={rss}\n".encode())   # one write: no interleaving
    hvd.shutdown()


main()
