"""Rank side: hvlite.torch -- collectives on tensors, and DistributedOptimizer matching the NumPy
path (hvlite.optim) on the same model and data."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import hvlite.torch as hvd  # noqa: E402
from helpers import assert_everywhere  # noqa: E402
from hvlite.optim import SGD, DistributedOptimizer as NumpyDistributed  # noqa: E402

hvd.init()
N, RANK = hvd.size(), hvd.rank()


def test_collectives_on_tensors():
    t = torch.full((3,), float(RANK))
    s = hvd.allreduce(t, op=hvd.Sum)
    g = hvd.allgather(torch.full((RANK + 1, 2), RANK, dtype=torch.int32))
    b = hvd.broadcast(torch.arange(4.0) + RANK, root_rank=0)
    u = torch.ones(2, dtype=torch.bfloat16) * (RANK + 1)
    hvd.allreduce_(u, op=hvd.Sum)
    h1 = hvd.allgather_async(torch.ones(1, dtype=torch.bfloat16) * RANK)
    h2 = hvd.broadcast_async(torch.full((2,), float(RANK)), root_rank=N - 1)
    h3 = hvd.allreduce_async(torch.ones(3), op=hvd.Sum)
    ag, bc, ar = h1.synchronize(), h2.synchronize(), h3.synchronize()
    ok_async = (ag.dtype == torch.bfloat16 and ag.tolist() == [float(r) for r in range(N)] and
                bc.tolist() == [N - 1.0] * 2 and ar.tolist() == [float(N)] * 3)
    ok = ok_async and (torch.all(s == N * (N - 1) / 2) and g.shape == (N * (N + 1) // 2, 2) and
          torch.equal(b, torch.arange(4.0)) and torch.all(t == RANK) and torch.all(u == N * (N + 1) / 2))
    assert_everywhere([] if ok else [f"{s} {g.shape} {b} {u} / async {ag} {bc} {ar}"])


def test_distributed_optimizer_matches_numpy_path():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((6, 3)).astype(np.float64)
    x = rng.standard_normal((N * 4 * 3, 6))
    y = rng.standard_normal((N * 4 * 3, 3))
    model = torch.nn.Linear(6, 3, bias=False, dtype=torch.float64)
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(w0.T.copy()))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    params = {"weight": w0.T.copy()}
    nopt = NumpyDistributed(SGD(0.1, momentum=0.9), params, prefix="np.")
    for step in range(3):
        rows = slice((step * N + RANK) * 4, (step * N + RANK + 1) * 4)
        xb, yb = torch.from_numpy(x[rows]), torch.from_numpy(y[rows])
        opt.zero_grad()
        loss = ((model(xb) - yb) ** 2).mean()
        loss.backward()
        opt.step()
        # the same in NumPy: d/dW mean((xW^T - y)^2) = 2/(B*3) (xW^T - y)^T x
        err = x[rows] @ params["weight"].T - y[rows]
        nopt.grad_ready("weight", 2.0 / err.size * err.T @ x[rows])
        nopt.step()
    same = np.allclose(model.weight.detach().numpy(), params["weight"], rtol=1e-10, atol=1e-12)
    digests = hvd.allgather_object(model.weight.detach().numpy().tobytes())
    assert_everywhere([] if same and len(set(digests)) == 1 else ["torch and NumPy paths differ"])


def test_broadcast_parameters_and_state():
    model = torch.nn.Linear(3, 2)
    torch.manual_seed(RANK)
    for p in model.parameters():
        torch.nn.init.normal_(p)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (RANK + 1))
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    got = hvd.allgather_object((opt.param_groups[0]["lr"],))
    assert_everywhere([] if all(g == (0.01,) for g in got) else [f"lr {got}"])
