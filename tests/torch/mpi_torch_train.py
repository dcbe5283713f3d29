"""Rank side: hvlite.torch for training -- DistributedOptimizer against one process on the
global batch, optimizer-state broadcast for every torch.optim optimizer, SyncBatchNorm against
BatchNorm on the gathered batch."""
import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
import hvlite.torch as hvd  # noqa: E402
from helpers import adasum_close, adasum_reference, assert_everywhere  # noqa: E402

hvd.init()
N, RANK = hvd.size(), hvd.rank()
torch.set_num_threads(1)


def data(step, micro=0, rows=4):
    """Rank r's batch for a step: rows of the global batch, rebuilt identically everywhere."""
    g = torch.Generator().manual_seed(step * 100 + micro)
    x = torch.randn(N * rows, 5, generator=g, dtype=torch.float64)
    y = torch.randn(N * rows, 2, generator=g, dtype=torch.float64)
    return x, y


def model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 2)).double()


def loss_fn(m, x, y):
    return ((m(x) - y) ** 2).mean()


def params_equal(a, b, tol=1e-11):
    return all(torch.allclose(p, q, rtol=tol, atol=tol) for p, q in zip(a.parameters(), b.parameters()))


def identical_everywhere(m):
    blobs = hvd.allgather_object(b"".join(p.detach().numpy().tobytes() for p in m.parameters()))
    return len(set(blobs)) == 1


CONFIGS = {
    "default": dict(),
    "sum": dict(op=hvd.Sum),
    "predivide": dict(gradient_predivide_factor=2.0),
    "num_groups": dict(num_groups=2),
    "groups": "groups",
    "accumulate": dict(backward_passes_per_step=2),
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_distributed_optimizer_equals_global_batch(config):
    dist, ref = model(seed=RANK), model(seed=0)           # broadcast fixes rank r's weights
    hvd.broadcast_parameters(dist.state_dict(), root_rank=0)
    kw = CONFIGS[config]
    if kw == "groups":
        kw = dict(groups=[[dist[0].weight, dist[2].weight]])
    k = kw.get("backward_passes_per_step", 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=dist.named_parameters(), **kw)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        opt.zero_grad()
        ropt.zero_grad()
        total = 0
        for micro in range(k):
            x, y = data(step, micro)
            mine = slice(RANK * 4, RANK * 4 + 4)
            loss_fn(dist, x[mine], y[mine]).backward()
            # the reduced gradient is the sum (op=Sum) or mean over ranks of each rank's
            # gradient, summed over the micro-batches
            parts = [loss_fn(ref, x[r * 4:r * 4 + 4], y[r * 4:r * 4 + 4]) for r in range(N)]
            total = total + (sum(parts) if kw.get("op") == hvd.Sum else sum(parts) / N)
        total.backward()
        opt.step()
        ropt.step()
    ok = params_equal(dist, ref) and identical_everywhere(dist)
    assert_everywhere([] if ok else [f"{config}: parameters differ from the global batch"])


def test_an_lr_scheduler_made_before_the_wrap_keeps_the_reduction():
    """torch's schedulers patch `step` onto the optimizer object they are given; the wrapped
    optimizer's step must still reduce (and the scheduler still set the shared groups' lr)."""
    dist, ref = model(seed=RANK), model(seed=0)
    hvd.broadcast_parameters(dist.state_dict(), root_rank=0)
    inner = torch.optim.SGD(dist.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(inner, step_size=1, gamma=0.5)
    opt = hvd.DistributedOptimizer(inner, named_parameters=dist.named_parameters())
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    rsched = torch.optim.lr_scheduler.StepLR(ropt, step_size=1, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # "lr_scheduler.step() before optimizer.step()"
        for step in range(3):
            opt.zero_grad()
            ropt.zero_grad()
            x, y = data(step)
            loss_fn(dist, x[RANK * 4:RANK * 4 + 4], y[RANK * 4:RANK * 4 + 4]).backward()
            sum(loss_fn(ref, x[r * 4:r * 4 + 4], y[r * 4:r * 4 + 4]) for r in range(N)).div(
                N).backward()
            opt.step()
            ropt.step()
            sched.step()
            rsched.step()
    ok = (params_equal(dist, ref) and identical_everywhere(dist)
          and opt.param_groups[0]["lr"] == ropt.param_groups[0]["lr"] == 0.1 * 0.5 ** 3)
    assert_everywhere([] if ok else ["a scheduler made before the wrap: the parameters differ "
                                     "from the global batch's, or the lr was not scheduled"])


@pytest.mark.parametrize("grouping", [dict(num_groups=1), dict(num_groups=2), "groups"])
def test_grouped_gradients_are_compressed_as_ungrouped_ones(grouping):
    """compression= reaches the grouped allreduce: grouped and ungrouped fp16 runs end with the
    same bits, and both differ from the uncompressed run (the gradients lose bits in fp16).
    Only rank 0's gradients are nonzero and op=Sum, so the sums are exact whatever order a
    fused or unfused algorithm adds in."""
    def run(compression, **kw):
        m = model(seed=0)
        if kw.get("groups") == "groups":
            kw = dict(groups=[[m[0].weight, m[2].weight], [m[0].bias]])
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                       named_parameters=m.named_parameters(),
                                       compression=compression, op=hvd.Sum, **kw)
        for step in range(3):
            opt.zero_grad()
            x, y = data(step)
            (loss_fn(m, x[:4], y[:4]) * float(RANK == 0)).backward()
            opt.step()
        return b"".join(p.detach().numpy().tobytes() for p in m.parameters())
    kw = dict(groups="groups") if grouping == "groups" else grouping
    grouped = run(hvd.Compression.fp16, **kw)
    fails = []
    if grouped != run(hvd.Compression.fp16):
        fails.append(f"{grouping}: grouped fp16 differs from ungrouped fp16")
    if grouped == run(hvd.Compression.none, **kw):
        fails.append(f"{grouping}: grouped fp16 gave the uncompressed parameters")
    if len(set(hvd.allgather_object(grouped))) != 1:
        fails.append(f"{grouping}: parameters differ across ranks")
    assert_everywhere(fails)


def test_synchronize_protocol_and_checks():
    fails = []
    dist, ref = model(), model()
    base = torch.optim.SGD(dist.parameters(), lr=0.5)
    opt = hvd.DistributedOptimizer(base, named_parameters=dist.named_parameters())
    ropt = torch.optim.SGD(ref.parameters(), lr=0.5)
    if not (isinstance(opt, torch.optim.SGD) and isinstance(opt, torch.optim.Optimizer)):
        fails.append("not an instance of the wrapped optimizer's class")
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x, y = data(0)
    loss_fn(dist, x[RANK * 4:RANK * 4 + 4], y[RANK * 4:RANK * 4 + 4]).backward()
    try:
        opt.zero_grad()
        fails.append("zero_grad with allreduces in flight accepted")
    except AssertionError:
        pass
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(dist.parameters(), 0.05)     # on the averaged gradients
    with opt.skip_synchronize():
        opt.step()
    sched.step()
    sum(loss_fn(ref, x[r * 4:r * 4 + 4], y[r * 4:r * 4 + 4]) for r in range(N)).div(N).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.05)
    ropt.step()
    if not params_equal(dist, ref):
        fails.append("synchronize + clip + skip_synchronize differs from the reference")
    if opt.param_groups[0]["lr"] != 0.25:
        fails.append(f"lr scheduler: {opt.param_groups[0]['lr']}")
    opt.zero_grad()
    loss_fn(dist, x[:4], y[:4]).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        opt.step()
    want = ("optimizer.step() called without optimizer.skip_synchronize() context after "
            "optimizer.synchronize(). This can cause training slowdown. You may want to "
            "consider using optimizer.skip_synchronize() context if you use "
            "optimizer.synchronize() in your code.")          # Horovod's text, a UserWarning
    if [(x.category, str(x.message)) for x in w] != [(UserWarning, want)]:
        fails.append(f"step() after synchronize(): warned {[(x.category, str(x.message)) for x in w]}")
    names = dict(dist.named_parameters())
    if opt._parameter_names != {p: n for n, p in names.items()}:
        fails.append(f"_parameter_names {opt._parameter_names}")
    anon = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1))
    if sorted(anon._parameter_names.values()) != [f"allreduce.noname.0.{j}" for j in range(len(names))]:
        fails.append(f"_parameter_names without names {anon._parameter_names}")
    for bad in (dict(named_parameters=[("a", p) for p in dist.parameters()]),
                dict(named_parameters=list(dist.named_parameters())[:1])):
        try:
            hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1), **bad)
            fails.append(f"accepted {bad}")
        except ValueError:
            pass
    assert_everywhere(fails)


@pytest.mark.parametrize("k", [1, 2])
def test_adasum_optimizer_combines_the_ranks_updates(k):
    """op=hvd.Adasum is Horovod's Adasum optimizer: each rank steps the wrapped optimizer on its
    own gradients (its own momentum), and every parameter moves by the Adasum of the ranks'
    updates; against N local models stepped by hand and the NumPy reference."""
    fails = []
    dist = model(seed=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=dist.named_parameters(), op=hvd.Adasum,
                                   backward_passes_per_step=k)
    mine = [model(seed=0) for _ in range(N)]
    theirs = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in mine]
    for step in range(3):
        start = [p.detach().clone() for p in dist.parameters()]
        for micro in range(k):
            x, y = data(step, micro)
            loss_fn(dist, x[RANK * 4:(RANK + 1) * 4], y[RANK * 4:(RANK + 1) * 4]).backward()
        opt.synchronize()                   # nothing to do with Adasum, as in Horovod
        opt.step()
        opt.zero_grad()
        updates = []
        for r, (m, o) in enumerate(zip(mine, theirs)):
            with torch.no_grad():
                for q, s0 in zip(m.parameters(), start):
                    q.copy_(s0)
            o.zero_grad()
            for micro in range(k):
                x, y = data(step, micro)
                loss_fn(m, x[r * 4:(r + 1) * 4], y[r * 4:(r + 1) * 4]).backward()
            o.step()
            updates.append([(q.detach() - s0).numpy() for q, s0 in zip(m.parameters(), start)])
        for i, (p, s0) in enumerate(zip(dist.parameters(), start)):
            want = s0.numpy() + adasum_reference([u[i] for u in updates])
            if not adasum_close(p.detach().numpy(), want, 4):
                fails.append(f"step {step} parameter {i}: {p.detach().numpy().ravel()[:3]} vs "
                             f"{want.ravel()[:3]}")
    if not identical_everywhere(dist):
        fails.append("parameters differ across ranks")
    try:
        with opt.skip_synchronize():
            pass
        fails.append("skip_synchronize accepted")
    except AssertionError:
        pass
    for bad in (dict(compression=hvd.Compression.topk), dict(gradient_predivide_factor=2.0)):
        try:
            hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1), op=hvd.Adasum,
                                     **bad)
            fails.append(f"accepted {bad}")
        except ValueError:
            pass
    assert_everywhere(fails)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients(sparse_as_dense):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(6, 3, sparse=True).double()
    ref = copy.deepcopy(emb)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.5),
                                   named_parameters=emb.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.5)
    idx = [torch.tensor([r % 6, (2 * r + 1) % 6, 5]) for r in range(N)]
    for _ in range(2):
        opt.zero_grad()
        ropt.zero_grad()
        (emb(idx[RANK]) ** 2).sum().backward()
        opt.step()
        sum((ref(i) ** 2).sum() for i in idx).div(N).backward()
        ropt.step()
    ok = torch.allclose(emb.weight, ref.weight, rtol=1e-12, atol=1e-12)
    assert_everywhere([] if ok else [f"{emb.weight} vs {ref.weight}"])


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients_in_a_group_with_sparse_adam(sparse_as_dense):
    """Two sparse embeddings and a dense layer in one group: sparse gradients come back sparse
    (SparseAdam takes only those) unless sparse_as_dense, and equal the global average."""
    def make():
        torch.manual_seed(0)
        e1 = torch.nn.Embedding(6, 3, sparse=True).double()
        e2 = torch.nn.Embedding(4, 3, sparse=True).double()
        lin = torch.nn.Linear(3, 1).double()
        named = [("e1", e1.weight), ("e2", e2.weight)] + [("lin." + n, p) for n, p in lin.named_parameters()]

        def loss(i, r):
            return (e1(i) ** 2).sum() + e2(torch.tensor([r % 4])).sum() + lin(e1(i).detach()).sum()
        return named, loss
    idx = [torch.tensor([r % 6, 5]) for r in range(N)]
    named, loss = make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in named], lr=0.1),
                                   named_parameters=named, num_groups=1,
                                   sparse_as_dense=sparse_as_dense)
    loss(idx[RANK], RANK).backward()
    opt.synchronize()
    got = {n: p.grad for n, p in named}
    # the reference: every rank's gradients, averaged, on a copy without the optimizer's hooks
    # (a backward through the hooked parameters starts allreduces that race with the reads)
    ref_named, ref_loss = make()
    want = {}
    for r in range(N):
        for n, p in ref_named:
            p.grad = None
        ref_loss(idx[r], r).backward()
        for n, p in ref_named:
            want[n] = want.get(n, 0) + p.grad.to_dense() / N
    fails = []
    for n, g in got.items():
        sparse = n.startswith("e")     # sparse_as_dense reduces dense, hands back sparse
        if g is None or g.is_sparse != sparse:
            fails.append(f"{n}: sparse gradient expected {sparse}")
        elif not torch.allclose(g.to_dense(), want[n], rtol=1e-12, atol=1e-12):
            fails.append(f"{n}: {g.to_dense()} vs {want[n]}")
    # the same through step(), under SparseAdam, which refuses dense gradients: with
    # sparse_as_dense too, as in Horovod (the reduced gradient is made sparse again)
    f1, f2 = torch.nn.Embedding(6, 3, sparse=True), torch.nn.Embedding(4, 3, sparse=True)
    adam = hvd.DistributedOptimizer(torch.optim.SparseAdam([f1.weight, f2.weight], lr=0.1),
                                    named_parameters=[("f1", f1.weight), ("f2", f2.weight)],
                                    num_groups=1, sparse_as_dense=sparse_as_dense)
    ((f1(idx[RANK]) ** 2).sum() + f2(torch.tensor([RANK % 4])).sum()).backward()
    try:
        adam.step()
    except Exception as e:      # noqa: BLE001 - reported on every rank
        fails.append(f"SparseAdam step: {type(e).__name__}: {e}")
    assert_everywhere(fails)


def test_broadcast_optimizer_state_with_parameters_lacking_gradients():
    """No gradient yet (a fresh optimizer, a frozen parameter, a layer a step did not reach):
    broadcast_optimizer_state works, and from a fresh optimizer it initializes the state as
    Horovod does, leaving a zero gradient on each trainable parameter (scripts broadcast it)."""
    fails = []
    m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2)).double()
    m[0].bias.requires_grad_(False)
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(m.parameters(), lr=0.01 * (RANK + 1), momentum=0.9, nesterov=True,
                        weight_decay=1e-6), named_parameters=m.named_parameters())
    for when in ("fresh", "partial"):
        try:
            hvd.broadcast_optimizer_state(opt, root_rank=N - 1)
        except Exception as e:  # noqa: BLE001 - reported on every rank
            fails.append(f"{when}: {type(e).__name__}: {e}")
        got = hvd.allgather_object(flat(opt.state_dict()))
        if any(g != got[0] for g in got) or not opt.state_dict()["state"]:
            fails.append(f"{when}: state empty or differs across ranks")
        if when == "fresh":
            grad = m[1].weight.grad
            if m[0].bias.grad is not None or grad is None or torch.count_nonzero(grad):
                fails.append(f"fresh: gradients {m[0].bias.grad} / {grad}")
            elif not torch.equal(hvd.broadcast(grad, root_rank=0), grad):
                fails.append("fresh: broadcast of the gradient differs")
        opt.zero_grad()
        m[0](torch.ones(1, 3, dtype=torch.float64) * RANK).sum().backward()    # m[1] gets none
        opt.step()
    if not identical_everywhere(m):
        fails.append("parameters differ")
    assert_everywhere(fails)


def test_join_with_uneven_batches():
    """Rank r has r + 1 batches: after its last one it joins, contributing zeros, and the
    average still divides by N (Horovod's join semantics)."""
    dist, ref = model(), model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1),
                                   named_parameters=dist.named_parameters())
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(RANK + 1):
        x, y = data(step)
        opt.zero_grad()
        loss_fn(dist, x[RANK * 4:RANK * 4 + 4], y[RANK * 4:RANK * 4 + 4]).backward()
        opt.step()
    last = hvd.join()
    for step in range(N):      # the reference: ranks >= step take part in step `step`
        x, y = data(step)
        ropt.zero_grad()
        live = range(step, N)
        sum(loss_fn(ref, x[r * 4:r * 4 + 4], y[r * 4:r * 4 + 4]) for r in live).div(N).backward()
        ropt.step()
        if step == RANK:
            mine = [p.detach().clone() for p in ref.parameters()]
    ok = last == N - 1 and all(torch.allclose(p, q, rtol=1e-11, atol=1e-12)
                               for p, q in zip(dist.parameters(), mine))
    assert_everywhere([] if ok else [f"join: last {last}, parameters differ"])


# ---- optimizer state ------------------------------------------------------------------------

def optimizers():
    out = []
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and \
                cls is not torch.optim.Optimizer:
            out.append(name)
    return out


def build(name, rank):
    """A model this optimizer can train, and the optimizer (hyper-parameters differ by rank)."""
    torch.manual_seed(rank)
    cls = getattr(torch.optim, name)
    if name == "SparseAdam":
        m = torch.nn.Embedding(5, 3, sparse=True)
    elif name == "Muon":                                  # 2-D parameters only
        m = torch.nn.Linear(4, 3, bias=False)
    else:
        m = torch.nn.Linear(4, 3)
    extra = {"momentum": 0.9} if name == "SGD" else {}      # so that SGD has state
    return m, cls(m.parameters(), lr=0.01 * (rank + 1), **extra)


def train(name, m, opt, steps):
    for s in range(steps):
        g = torch.Generator().manual_seed(s)
        if name == "SparseAdam":
            def closure():
                opt.zero_grad()
                loss = (m(torch.tensor([s % 5, 2])) ** 2).sum()
                loss.backward()
                return loss
        else:
            x = torch.randn(6, 4, generator=g)

            def closure():
                opt.zero_grad()
                loss = (m(x) ** 2).mean()
                loss.backward()
                return loss
        opt.step(closure)


def flat(obj):
    """A comparable rendering of a state dict: tensors by dtype, shape and bytes."""
    if isinstance(obj, torch.Tensor):
        return ("T", str(obj.dtype), tuple(obj.shape), obj.detach().contiguous().view(-1)
                .view(torch.uint8).numpy().tobytes() if obj.numel() else b"")
    if isinstance(obj, dict):
        return tuple(sorted((str(k), flat(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return tuple(flat(v) for v in obj)
    return repr(obj)


@pytest.mark.parametrize("name", optimizers())
def test_broadcast_optimizer_state(name):
    """Only rank 0 has trained (the others' state is empty and their lr differs); after the
    broadcasts every rank holds rank 0's state, and a further step stays identical."""
    m, opt = build(name, RANK)
    if RANK == 0:
        train(name, m, opt, 3)
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    got = hvd.allgather_object(flat(opt.state_dict()))
    fails = []
    if any(g != got[0] for g in got) or not opt.state_dict()["state"]:
        fails.append(f"{name}: optimizer state differs across ranks or is empty")
    train(name, m, opt, 1)
    blobs = hvd.allgather_object(b"".join(p.detach().numpy().tobytes() for p in m.parameters()))
    if len(set(blobs)) != 1:
        fails.append(f"{name}: parameters differ after a step from the broadcast state")
    assert_everywhere(fails)


def test_broadcast_optimizer_state_keeps_the_optimizers_own_groups():
    """Horovod writes root's options into the optimizer's groups: the group dicts (and, for a
    wrapped optimizer, the list the original object shares) stay the ones a scheduler made
    before the wrap, or any other code, holds."""
    m = model(seed=0)
    inner = torch.optim.SGD(m.parameters(), lr=0.1 * (RANK + 1), momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(inner, step_size=1, gamma=0.5)
    opt = hvd.DistributedOptimizer(inner, named_parameters=m.named_parameters())
    held, group = opt.param_groups, opt.param_groups[0]
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    fails = []
    if opt.param_groups is not held or opt.param_groups[0] is not group:
        fails.append("the optimizer's groups were replaced")
    if group["lr"] != 0.1 or inner.param_groups[0] is not group:
        fails.append(f"lr {group['lr']}, shared with the original: "
                     f"{inner.param_groups[0] is group}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched.step()                    # the scheduler still drives the wrapped optimizer's lr
    if opt.param_groups[0]["lr"] != 0.05:
        fails.append(f"after the scheduler's step: lr {opt.param_groups[0]['lr']}")
    assert_everywhere(fails)


def test_broadcast_state_of_distributed_optimizer():
    m = model(seed=RANK)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=0.01 * (RANK + 1)),
                                   named_parameters=m.named_parameters())
    hvd.broadcast_parameters(m.named_parameters(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    x, y = data(0)
    loss_fn(m, x[RANK * 4:RANK * 4 + 4], y[RANK * 4:RANK * 4 + 4]).backward()
    opt.step()
    got = hvd.allgather_object(flat(opt.state_dict()))
    ok = all(g == got[0] for g in got) and identical_everywhere(m) and \
        opt.param_groups[0]["lr"] == 0.01
    assert_everywhere([] if ok else ["DistributedOptimizer state or parameters differ"])


# ---- SyncBatchNorm ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3,), (3, 2, 2)])
def test_sync_batch_norm_equals_batch_norm_on_global_batch(shape):
    rows = [r + 2 for r in range(N)]                    # uneven shards
    g = torch.Generator().manual_seed(7)
    xs = [torch.randn(b, *shape, generator=g, dtype=torch.float64) * 3 + 1 for b in rows]
    ws = [torch.randn(b, *shape, generator=g, dtype=torch.float64) for b in rows]
    sync = hvd.SyncBatchNorm(shape[0], momentum=0.3).double()
    bn = (torch.nn.BatchNorm1d if len(shape) == 1 else torch.nn.BatchNorm2d)(
        shape[0], momentum=0.3).double()
    with torch.no_grad():
        for layer in (sync, bn):
            layer.weight.copy_(torch.arange(1.0, shape[0] + 1))
            layer.bias.copy_(torch.arange(shape[0]) * 0.5)
    fails = []
    for _ in range(2):
        x = xs[RANK].clone().requires_grad_()
        out = sync(x)
        (out * ws[RANK]).sum().backward()
        big = torch.cat(xs).requires_grad_()
        ref = bn(big)
        (ref * torch.cat(ws)).sum().backward()
        start = sum(rows[:RANK])
        mine = slice(start, start + rows[RANK])
        wgrad = hvd.allreduce(sync.weight.grad, op=hvd.Sum)
        bgrad = hvd.allreduce(sync.bias.grad, op=hvd.Sum)
        checks = {"output": (out, ref[mine]), "input grad": (x.grad, big.grad[mine]),
                  "weight grad": (wgrad, bn.weight.grad), "bias grad": (bgrad, bn.bias.grad),
                  "running mean": (sync.running_mean, bn.running_mean),
                  "running var": (sync.running_var, bn.running_var)}
        for what, (a, b) in checks.items():
            if not torch.allclose(a, b, rtol=1e-10, atol=1e-10):
                fails.append(f"{what}: {a} vs {b}")
        for layer in (sync, bn):
            layer.zero_grad()
    sync.eval()
    bn.eval()
    if not torch.allclose(sync(xs[RANK]), bn(xs[RANK]), rtol=1e-12, atol=1e-12):
        fails.append("eval mode")
    assert_everywhere(fails)
