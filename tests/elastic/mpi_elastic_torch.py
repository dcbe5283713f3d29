"""Rank side: hvlite.torch.elastic.TorchState: a commit of a model and its optimizer survives a
relaunch (new objects, other values, synced from the files), and restore() rolls back in memory."""
import os

import pytest
import torch

import hvlite.torch as hvd
from helpers import assert_everywhere

hvd.init()
RANK = hvd.rank()


def setup(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    return model, opt


def steps(model, opt, k):
    for i in range(k):
        x = torch.full((3, 5), float(i + 1))
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def test_torch_state(monkeypatch):
    monkeypatch.setenv("HVLITE_ELASTIC_DIR", os.path.join(os.environ["HVLITE_TEST_ELASTIC_BASE"],
                                                          "torch"))
    bad = []
    assert hvd.elastic.HostsUpdatedInterrupt is hvd.elastic.HostsUpdatedInterrupt
    model, opt = setup(1 + RANK)
    state = hvd.elastic.TorchState(model, opt, epoch=0)
    state.sync()                                 # rank 0's model everywhere
    if len(set(hvd.allgather_object(flat(model).sum().item()))) != 1:
        bad.append("sync left the ranks' models different")
    steps(model, opt, 2)
    state.epoch = 2
    state.commit()
    want = flat(model)
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    steps(model, opt, 1)
    state.restore()
    if not torch.equal(flat(model), want) or state.epoch != 2:
        bad.append("restore did not roll back the model")
    model2, opt2 = setup(50 + RANK)              # the relaunch
    state2 = hvd.elastic.TorchState(model2, opt2, epoch=-1)
    state2.sync()
    if not torch.equal(flat(model2), want) or state2.epoch != 2 or state2.commit_id != 1:
        bad.append(f"relaunch restored epoch {state2.epoch}, commit {state2.commit_id}")
    got = [opt2.state[p]["momentum_buffer"] for p in model2.parameters()]
    if not all(torch.equal(a, b) for a, b in zip(got, momentum)):
        bad.append("the optimizer's momentum was not restored")
    steps(model2, opt2, 1)                       # and it trains on
    assert_everywhere(bad)
    with pytest.raises(TypeError, match="model"):
        hvd.elastic.TorchState(model, opt, model=1)


def test_other_modules_and_optimizers_are_restored_in_place(monkeypatch):
    """Horovod's handlers: every module and optimizer among the keyword arguments (a GAN's
    discriminator and its optimizer) is saved by state_dict and restored into the caller's own
    objects, by sync (rank 0's everywhere, then a relaunch from the commit) and by restore."""
    monkeypatch.setenv("HVLITE_ELASTIC_DIR", os.path.join(os.environ["HVLITE_TEST_ELASTIC_BASE"],
                                                          "gan"))
    bad = []
    model, opt = setup(1 + RANK)
    disc, opt_d = setup(10 + RANK)
    state = hvd.elastic.TorchState(model, opt, disc=disc, opt_d=opt_d, epoch=0)
    state.sync()
    if state.disc is not disc or len(set(hvd.allgather_object(flat(disc).sum().item()))) != 1:
        bad.append("sync did not give every rank rank 0's discriminator, in the caller's object")
    steps(disc, opt_d, 2)
    state.commit()
    want = flat(disc)
    momentum = [opt_d.state[p]["momentum_buffer"].clone() for p in disc.parameters()]
    with torch.no_grad():
        for p in disc.parameters():
            p.add_(100.0)
    state.restore()
    if not torch.equal(flat(disc), want):
        bad.append("restore did not roll the caller's discriminator back")
    model2, opt2 = setup(50 + RANK)              # the relaunch
    disc2, opt_d2 = setup(60 + RANK)
    state2 = hvd.elastic.TorchState(model2, opt2, disc=disc2, opt_d=opt_d2, epoch=-1)
    state2.sync()
    got = [opt_d2.state[p]["momentum_buffer"] for p in disc2.parameters()]
    if not torch.equal(flat(disc2), want) or not all(
            torch.equal(a, b) for a, b in zip(got, momentum)):
        bad.append("the relaunch did not restore the discriminator and its optimizer")
    assert_everywhere(bad)
