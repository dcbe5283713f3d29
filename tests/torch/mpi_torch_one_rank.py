"""Rank side, one rank: DistributedOptimizer on a job of one process as Horovod has it (no
hooks outside an elastic job, so gradients may accumulate over several backward() calls), and
its argument checks."""
import warnings

import pytest

torch = pytest.importorskip("torch")
import hvlite.torch as hvd  # noqa: E402

hvd.init()
torch.set_num_threads(1)


def model():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2).double()


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 3, generator=g, dtype=torch.float64),
             torch.randn(4, 2, generator=g, dtype=torch.float64)) for _ in range(2)]


def test_one_rank_accumulates_over_backward_calls_as_plain_torch():
    dist, ref = model(), model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1),
                                   named_parameters=dist.named_parameters())
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for m in (dist, ref):
        for x, y in batches():                       # two backward() before one step()
            torch.nn.functional.mse_loss(m(x), y).backward()
    opt.step()
    ropt.step()
    assert all(torch.equal(a, b) for a, b in zip(dist.parameters(), ref.parameters()))


def test_an_elastic_job_of_one_rank_keeps_the_hooks(monkeypatch):
    monkeypatch.setenv("HOROVOD_ELASTIC", "1")       # it may grow: reductions start in backward
    dist = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1),
                                   named_parameters=dist.named_parameters())
    (x, y), _ = batches()
    torch.nn.functional.mse_loss(dist(x), y).backward()
    with pytest.raises(AssertionError, match="more than backward_passes_per_step"):
        torch.nn.functional.mse_loss(dist(x), y).backward()
    opt.synchronize()


@pytest.mark.parametrize("passes", [0, -1, 1.5])
def test_backward_passes_per_step_must_be_positive(passes):
    with pytest.raises(ValueError, match="backward_passes_per_step must be a positive integer"):
        hvd.DistributedOptimizer(torch.optim.SGD(model().parameters(), lr=0.1),
                                 backward_passes_per_step=passes)


def test_num_groups_is_deprecated_and_groups_win():
    m = model()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), num_groups=2,
                                       groups=[[m.weight, m.bias]],
                                       named_parameters=m.named_parameters())
    assert [x.category for x in w] == [DeprecationWarning], w
    assert len(set(opt._group_of.values())) == 1        # the one group given, not two
