"""Rank side: DistributedOptimizer(sparse_as_dense=True) under an optimizer that takes only sparse
gradients (SparseAdam), as Horovod's test_sparse_embeddings does: the gradient is reduced dense
and comes back sparse, in its own layout, before the step. Every rank's parameters must equal
one process's SparseAdam steps on the averaged gradient (made sparse the same way)."""
import copy

import pytest

torch = pytest.importorskip("torch")
import hvlite.torch as hvd  # noqa: E402
from helpers import assert_everywhere  # noqa: E402

hvd.init()
N, RANK = hvd.size(), hvd.rank()
torch.set_num_threads(1)
ROWS, DIM, STEPS = 12, 3, 4


def indices(step, r):
    """Rank r's lookups at a step: overlapping rows, rows only r touches, and rows 10 and 11
    that no rank touches (SparseAdam must leave them alone)."""
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.cat([torch.tensor([step % 3, r % 10]), torch.randint(0, 10, (5,), generator=g)])


def weights(step, r, n):
    g = torch.Generator().manual_seed(7 + 1000 * step + r)
    return torch.randn(n, DIM, generator=g, dtype=torch.float64)


def make():
    torch.manual_seed(0)
    return (torch.nn.Embedding(ROWS, DIM, sparse=True).double(),
            torch.nn.Embedding(ROWS, DIM, sparse=True).double())


def loss(e1, e2, step, r):
    i = indices(step, r)
    return (e1(i) * weights(step, r, len(i))).sum() + (e2(i[:3]) ** 2).sum()


def reference_grad(emb, step):
    """The average over the ranks of each rank's gradient, dense, then sparse like the original
    (rows whose average is zero left out, as Horovod's to_sparse() does)."""
    totals = [torch.zeros(ROWS, DIM, dtype=torch.float64) for _ in emb]
    for r in range(N):
        for e in emb:
            e.weight.grad = None
        loss(*emb, step, r).backward()
        for t, e in zip(totals, emb):
            t += e.weight.grad.to_dense() / N
    return [t.to_sparse(e.weight.grad.sparse_dim()) for t, e in zip(totals, emb)]


@pytest.mark.parametrize("num_groups", [0, 1])
def test_sparse_as_dense_with_sparse_adam(num_groups):
    e1, e2 = make()
    ref = copy.deepcopy((e1, e2))
    named = [("e1", e1.weight), ("e2", e2.weight)]
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam([p for _, p in named], lr=0.05),
                                   named_parameters=named, sparse_as_dense=True,
                                   num_groups=num_groups)
    ropt = torch.optim.SparseAdam([e.weight for e in ref], lr=0.05)
    fails = []
    for step in range(STEPS):
        opt.zero_grad()
        loss(e1, e2, step, RANK).backward()
        opt.synchronize()
        want = reference_grad(ref, step)
        for (name, p), w in zip(named, want):
            g = p.grad
            if not g.is_sparse or g.sparse_dim() != w.sparse_dim():
                fails.append(f"step {step} {name}: gradient layout {g.layout}, sparse_dim "
                             f"{g.sparse_dim() if g.is_sparse else '-'}; want sparse, "
                             f"sparse_dim {w.sparse_dim()}")
            elif not torch.allclose(g.to_dense(), w.to_dense(), rtol=1e-12, atol=1e-12):
                fails.append(f"step {step} {name}: gradient {g.to_dense()} vs {w.to_dense()}")
        try:
            with opt.skip_synchronize():
                opt.step()
        except Exception as e:  # noqa: BLE001 - reported on every rank
            fails.append(f"step {step}: {type(e).__name__}: {e}")
            break
        for e, w in zip(ref, want):
            e.weight.grad = w
        ropt.step()
        for (name, p), r in zip(named, ref):
            if not torch.allclose(p, r.weight, rtol=1e-12, atol=1e-12):
                fails.append(f"step {step} {name}: {p} vs {r.weight}")
    untouched = [n for n, p in named
                 if not torch.equal(p[10:], make()[0 if n == "e1" else 1].weight[10:])]
    fails += [f"{n}: rows no rank touched moved" for n in untouched]
    assert_everywhere(fails)


def test_horovods_test_sparse_embeddings():
    """Horovod's test_sparse_embeddings as it stands: SparseAdam steps with sparse_as_dense
    False and True, ranks looking up different rows."""
    fails = []
    for sparse_as_dense in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Embedding(10, 3, sparse=True)
        ref = copy.deepcopy(model)
        inp = (torch.LongTensor([[1, 2, 4, 5], [4, 3, 2, 9]]) if RANK == 0
               else torch.LongTensor([[1, 3, 4], [4, 7, 9]]))
        opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(model.parameters()), lr=0.1),
                                       sparse_as_dense=sparse_as_dense)
        model(inp).sum().backward()
        try:
            opt.step()
        except Exception as e:  # noqa: BLE001 - reported on every rank
            fails.append(f"sparse_as_dense={sparse_as_dense}: {type(e).__name__}: {e}")
            continue
        # every rank's weights equal one process's SparseAdam step on the averaged gradient
        total = 0
        for r in range(N):
            ref.zero_grad(set_to_none=True)
            i = (torch.LongTensor([[1, 2, 4, 5], [4, 3, 2, 9]]) if r == 0
                 else torch.LongTensor([[1, 3, 4], [4, 7, 9]]))
            ref(i).sum().backward()
            total = total + ref.weight.grad.to_dense() / N
        ref.weight.grad = total.to_sparse(1)
        torch.optim.SparseAdam(list(ref.parameters()), lr=0.1).step()
        if not torch.allclose(model.weight, ref.weight, rtol=1e-6, atol=1e-6):
            fails.append(f"sparse_as_dense={sparse_as_dense}: {model.weight} vs {ref.weight}")
    assert_everywhere(fails)
