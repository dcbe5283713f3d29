"""Rank side, one rank: DistributedOptimizer on a job of one process as Horovod has it (no
hooks outside an elastic job, so gradients may accumulate over several backward() calls), and
its argument checks."""
import warnings

import numpy as np
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


@pytest.mark.parametrize("passes", [0, -1, 1.5, "2", None])
def test_backward_passes_per_step_must_be_positive(passes):
    with pytest.raises(ValueError, match="backward_passes_per_step must be a positive whole"):
        hvd.DistributedOptimizer(torch.optim.SGD(model().parameters(), lr=0.1),
                                 backward_passes_per_step=passes)


@pytest.mark.parametrize("passes,want", [(2.0, 2), (True, 1), (3, 3)])
def test_backward_passes_per_step_as_horovod_takes_it(passes, want):
    """Horovod only refuses passes <= 0: 2.0 (from a division) and True count as 2 and 1."""
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model().parameters(), lr=0.1),
                                   backward_passes_per_step=passes)
    assert opt.backward_passes_per_step == want and type(opt.backward_passes_per_step) is int


@pytest.mark.parametrize("groups", [0, -1, (1,), 1.5, True])
def test_groups_must_be_a_positive_count_or_lists(groups):
    with pytest.raises(ValueError, match="groups should be"):
        hvd.DistributedOptimizer(torch.optim.SGD(model().parameters(), lr=0.1), groups=groups)


def test_op_none_is_average_as_in_horovod():
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model().parameters(), lr=0.1), op=None)
    assert opt.op is hvd.Average


def test_num_groups_is_deprecated_and_groups_win():
    m = model()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), num_groups=2,
                                       groups=[[m.weight, m.bias]],
                                       named_parameters=m.named_parameters())
    assert [x.category for x in w] == [DeprecationWarning], w
    assert len(set(opt._group_of.values())) == 1        # the one group given, not two


def test_inputs_horovod_takes():
    """What Horovod 0.28.1 accepts, accepted alike: whole-number float splits (it makes int32
    of them), the fp16 compressor on an integer tensor (left uncast) and with Max (cast, then
    reduced), and DistributedOptimizer(op=Adasum, compression=fp16) on one rank."""
    x = torch.arange(4.0)
    out, got = hvd.alltoall(x, splits=[4.0])
    assert out.tolist() == x.tolist() and got.tolist() == [4]
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(x, splits=[2.5])
    ints = torch.arange(5)
    assert torch.equal(hvd.allreduce(ints, compression=hvd.Compression.fp16), ints)
    y = torch.tensor([1.0001, -2.5])
    assert torch.equal(hvd.allreduce(y, op=hvd.Max, compression=hvd.Compression.fp16),
                       y.half().float())
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), op=hvd.Adasum,
                                   compression=hvd.Compression.fp16,
                                   named_parameters=m.named_parameters())
    (xb, yb), _ = batches()
    torch.nn.functional.mse_loss(m(xb), yb).backward()
    opt.step()


def test_broadcast_parameters_refuses_what_it_cannot_overwrite():
    """An entry that is not a tensor would keep each rank's own value: refused, named (Horovod
    fails on it too, with an AttributeError)."""
    m = model()
    with pytest.raises(ValueError, match="'step' is a int, not a tensor"):
        hvd.broadcast_parameters({**m.state_dict(), "step": 3}, root_rank=0)
    with pytest.raises(ValueError, match="entry 0 is a ndarray"):
        hvd.broadcast_parameters([np.ones(2)], root_rank=0)
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
