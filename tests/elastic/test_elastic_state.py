"""hvlite.elastic's states: in-process (snapshots, restore) and under mpiexec on real files
(tests/elastic/mpi_elastic_state.py at 3 ranks; the torch state at 2)."""
import numpy as np
import pytest

import hvlite
import hvlite.elastic as elastic


def test_horovod_names():
    assert hvlite.elastic is elastic
    assert elastic.HostsUpdatedInterrupt is hvlite.HostsUpdatedInterrupt
    assert issubclass(elastic.HostsUpdatedInterrupt, RuntimeError)
    assert elastic.HorovodInternalError is hvlite.InternalError
    assert issubclass(elastic.HorovodInternalError, RuntimeError)
    for cls in (hvlite.LostRankError, hvlite.ShutdownError, hvlite.StallError, hvlite.MPIError):
        assert issubclass(cls, elastic.HorovodInternalError), cls
    assert not issubclass(hvlite.InvalidArgumentError, elastic.HorovodInternalError)
    for name in ("State", "ObjectState", "NumpyState", "run"):
        assert callable(getattr(elastic, name))


def test_object_state_snapshots_are_copies():
    state = elastic.ObjectState(epoch=1, seen=[1, 2])
    state.save()
    state.epoch, state.seen = 5, state.seen + [3]
    state.seen.append(4)
    state.restore()
    assert (state.epoch, state.seen) == (1, [1, 2])
    state.seen.append(9)                 # restoring twice gives the snapshot again
    state.restore()
    assert state.seen == [1, 2]


def test_numpy_state_restores_in_place():
    from hvlite.optim import SGD
    w = np.arange(4.0)
    opt = SGD(0.5, momentum=0.9)
    opt.step({"w": w}, {"w": np.ones(4)})
    state = elastic.NumpyState({"w": w}, opt, step=3)
    state.save()
    held = w                             # what a model or DistributedOptimizer holds
    opt.step({"w": w}, {"w": np.ones(4)})
    state.step = 4
    state.restore()
    assert held is state.params["w"] and np.array_equal(held, np.arange(4.0) - 0.5)
    assert opt.steps == 1 and np.array_equal(opt.state["w"]["momentum"], np.ones(4))
    assert state.step == 3


def test_states_under_mpiexec(mpirun, tmp_path):
    mpirun(3, "tests/elastic/mpi_elastic_state.py", env={"HVLITE_TEST_ELASTIC_BASE": str(tmp_path)},
           timeout=120)


def test_torch_state_round_trip_in_process():
    """TorchState's own part: the snapshot (copies), restore(), and a commit (tensors as raw
    bytes, read back by the restricted reader) loaded into a new model and optimizer, as sync()
    does (under mpiexec: the elastic_long test)."""
    torch = pytest.importorskip("torch")
    import hvlite.torch as hvd
    from hvlite.elastic import codec

    def setup(seed):
        torch.manual_seed(seed)
        model = torch.nn.Linear(3, 2)
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(model, opt):
        opt.zero_grad()
        model(torch.ones(4, 3)).sum().backward()
        opt.step()

    model, opt = setup(1)
    step(model, opt)
    state = hvd.elastic.TorchState(model, opt, epoch=3)
    state.save()
    want = [p.detach().clone() for p in model.parameters()]
    step(model, opt)
    state.epoch = 4
    state.restore()
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), want)) and state.epoch == 3
    model2, opt2 = setup(2)
    state2 = hvd.elastic.TorchState(model2, opt2, epoch=0)
    state2._apply(codec.decode(b"".join(codec.encode({}, state._saved)))[1])
    assert all(torch.equal(p, w) for p, w in zip(model2.parameters(), want)) and state2.epoch == 3
    assert all(torch.equal(opt2.state[p2]["momentum_buffer"], opt.state[p]["momentum_buffer"])
               for p, p2 in zip(model.parameters(), model2.parameters()))
    with pytest.raises(TypeError, match="model"):
        hvd.elastic.TorchState(model, opt, model=1)


def test_torch_states_other_modules_and_optimizers_in_place():
    """Horovod's handlers: a module or optimizer among the keyword arguments (a GAN's
    discriminator and its optimizer) is saved by state_dict and restored into the caller's own
    object, by restore() and from a commit (read back by the restricted reader)."""
    torch = pytest.importorskip("torch")
    import hvlite.torch as hvd
    from hvlite.elastic import codec

    def setup(seed):
        torch.manual_seed(seed)
        disc = torch.nn.Linear(3, 2)
        return disc, torch.optim.SGD(disc.parameters(), lr=0.1, momentum=0.9)

    disc, opt_d = setup(1)
    opt_d.zero_grad()
    disc(torch.ones(4, 3)).sum().backward()
    opt_d.step()
    state = hvd.elastic.TorchState(None, None, disc=disc, opt_d=opt_d, epoch=3)
    state.save()
    want = [p.detach().clone() for p in disc.parameters()]
    with torch.no_grad():
        for p in disc.parameters():
            p.add_(100.0)
    state.restore()
    assert state.disc is disc and state.opt_d is opt_d
    assert all(torch.equal(p, w) for p, w in zip(disc.parameters(), want))
    disc2, opt_d2 = setup(2)
    state2 = hvd.elastic.TorchState(disc=disc2, opt_d=opt_d2, epoch=0)
    state2._apply(codec.decode(b"".join(codec.encode({}, state._saved)))[1])
    assert state2.disc is disc2 and state2.epoch == 3
    assert all(torch.equal(p, w) for p, w in zip(disc2.parameters(), want))
    assert all(torch.equal(opt_d2.state[p2]["momentum_buffer"], opt_d.state[p]["momentum_buffer"])
               for p, p2 in zip(disc.parameters(), disc2.parameters()))


@pytest.mark.elastic_long
def test_torch_state_under_mpiexec(mpirun, tmp_path):
    pytest.importorskip("torch")
    mpirun(2, "tests/elastic/mpi_elastic_torch.py", env={"HVLITE_TEST_ELASTIC_BASE": str(tmp_path)},
           timeout=180)
