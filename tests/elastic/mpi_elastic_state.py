"""Rank side: hvlite.elastic's states on real files under mpiexec. A relaunch is simulated in one
process by new state objects (with other values) and sync(); the failures a real relaunch meets
are made by hand: a commit only some ranks wrote, a rank with no directory, a directory left
from an older launch holding a commit of the same id with other content.

HVLITE_TEST_ELASTIC_BASE: a directory every rank sees; each test commits in its own below it."""
import os
import pickle

import numpy as np
import pytest

import hvlite as hvd
from helpers import assert_everywhere
from hvlite.elastic import store as store_mod
from hvlite.optim import SGD, DistributedOptimizer

hvd.init()
N, RANK = hvd.size(), hvd.rank()
BASE = os.environ["HVLITE_TEST_ELASTIC_BASE"]


@pytest.fixture
def elastic_dir(request, monkeypatch):
    d = os.path.join(BASE, request.node.name.replace("[", "-").replace("]", ""))
    monkeypatch.setenv("HVLITE_ELASTIC_DIR", d)
    monkeypatch.delenv("HVLITE_ELASTIC_RESTART", raising=False)
    return d


def model(seed):
    r = np.random.default_rng(seed)
    return {"w": r.standard_normal((4, 3)), "b": r.standard_normal(3)}


def train_steps(params, opt, k, state):
    """k steps of averaged made-up gradients (the same on every rank after the allreduce)."""
    dist = DistributedOptimizer(opt, params)
    for _ in range(k):
        for name in sorted(params):
            dist.grad_ready(name, params[name] * 0.1 + RANK)
        dist.step()
        state.step += 1


def fresh(seed):
    """A new process's state: other values on every rank, which sync() must replace."""
    params = model(seed)
    opt = SGD(0.1, momentum=0.9)
    return params, opt, hvd.elastic.NumpyState(params, opt, step=-seed, note=f"rank {RANK}")


def synced_and_committed(seed, steps):
    """fresh(seed), synced, then one commit after each number of steps in `steps`."""
    params, opt, state = fresh(seed)
    state.sync()
    for k in steps:
        train_steps(params, opt, k, state)
        state.commit()
    return params, opt, state


def same(a, b):
    return sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)


def test_in_memory_without_a_directory(monkeypatch):
    monkeypatch.delenv("HVLITE_ELASTIC_DIR", raising=False)
    params, opt, state = fresh(100 + RANK)
    state.sync()                         # nothing committed: rank 0's values everywhere
    bad = []
    if not same(params, model(100)) or state.step != -100 or state.note != "rank 0":
        bad.append("sync did not give rank 0's state")
    train_steps(params, opt, 2, state)
    state.commit()
    kept = {k: v.copy() for k, v in params.items()}
    momentum = {k: v["momentum"].copy() for k, v in opt.state.items()}
    train_steps(params, opt, 3, state)
    state.note = "changed"
    state.restore()
    if not same(params, kept) or state.step != -98 or state.note != "rank 0":
        bad.append(f"restore: step {state.step}, note {state.note!r}")
    if not same({k: v["momentum"] for k, v in opt.state.items()}, momentum) or opt.steps != 2:
        bad.append("restore did not bring the optimizer's state back")
    if state.commit_id != 1:
        bad.append(f"commit id {state.commit_id}")
    assert_everywhere(bad)


def test_commits_survive_a_relaunch(elastic_dir):
    params, opt, state = fresh(1 + RANK)
    state.sync()
    bad = []
    for _ in range(3):
        train_steps(params, opt, 2, state)
        state.commit()
    want = {k: v.copy() for k, v in params.items()}
    mine = store_mod.Store(elastic_dir, RANK)
    if mine.commits() != [2, 3] or mine.generation() != 1:
        bad.append(f"rank directory holds {mine.commits()}, generation {mine.generation()}")
    payload = pickle.loads(mine.read(3))
    if payload["meta"]["commit"] != 3 or payload["meta"]["size"] != N or \
            not same(payload["state"]["params"], want):
        bad.append(f"commit 3 on disk is not the state committed: {payload['meta']}")
    train_steps(params, opt, 1, state)           # after the commit: lost in the relaunch
    params2, opt2, state2 = fresh(50 + RANK)     # the relaunch
    state2.sync()
    if not same(params2, want) or state2.step != -1 + 6 or state2.commit_id != 3:
        bad.append(f"relaunch restored step {state2.step}, commit {state2.commit_id}")
    if opt2.steps != 6 or not same({k: v["momentum"] for k, v in opt2.state.items()},
                                   {k: v["momentum"] for k, v in pickle.loads(
                                       mine.read(3))["state"]["optimizer"]["state"].items()}):
        bad.append("the optimizer's state was not restored")
    if state2.restored["root"] != 0 or mine.generation() != 2:
        bad.append(f"restored {state2.restored}, generation {mine.generation()}")
    assert_everywhere(bad)


def test_a_commit_not_every_survivor_wrote_is_dropped(elastic_dir):
    params, opt, state = synced_and_committed(7, [1, 1])
    finished = {k: v.copy() for k, v in params.items()}
    train_steps(params, opt, 1, state)
    mine = store_mod.Store(elastic_dir, RANK)
    if RANK != 1:          # rank 1 "died" before writing commit 3
        mine.write(3, lambda f: pickle.dump({"meta": {"commit": 3, "size": N},
                                             "state": state._capture()}, f))
    params2, opt2, state2 = fresh(8 + RANK)
    state2.sync()
    bad = []
    if state2.commit_id != 2 or not same(params2, finished):
        bad.append(f"restored commit {state2.commit_id}, not 2")
    if 3 in mine.commits() or 2 not in mine.commits():
        bad.append(f"after sync the rank holds {mine.commits()}: commit 3 was never finished")
    assert_everywhere(bad)


def test_new_and_stale_ranks_start_from_the_survivors_commit(elastic_dir):
    if N < 3:
        pytest.skip("needs a new rank and a stale one beside a survivor")
    params, opt, state = synced_and_committed(11, [2, 2])
    want = {k: v.copy() for k, v in params.items()}
    mine = store_mod.Store(elastic_dir, RANK)
    hvd.barrier()
    if RANK == 2:          # new: no directory at all
        for name in os.listdir(mine.path):
            os.unlink(os.path.join(mine.path, name))
    if RANK == 1:          # stale: an older launch, and a commit 2 with other content
        mine.write(2, lambda f: pickle.dump({"meta": {"commit": 2, "size": N},
                                             "state": fresh(99)[2]._capture()}, f))
        mine.set_generation(0)
    hvd.barrier()
    params2, opt2, state2 = fresh(20 + RANK)
    state2.sync()
    bad = []
    if state2.commit_id != 2 or not same(params2, want) or state2.restored["root"] != 0:
        bad.append(f"restored {state2.restored}")
    if mine.commits() != [2] and RANK != 0:
        bad.append(f"holds {mine.commits()} after sync")
    if not same(pickle.loads(mine.read(2))["state"]["params"], want):
        bad.append("its copy of commit 2 is not the survivors'")
    assert_everywhere(bad)


def test_new_hosts_interrupt_every_rank_at_a_durable_commit(elastic_dir):
    params, opt, state = synced_and_committed(3, [1])
    if RANK == 0:
        open(os.path.join(elastic_dir, hvd.elastic.NOTICE), "w").close()
    hvd.barrier()
    train_steps(params, opt, 1, state)
    bad = []
    try:
        state.commit()
        bad.append("no HostsUpdatedInterrupt")
    except hvd.HostsUpdatedInterrupt as e:
        if e.skip_sync:
            bad.append("skip_sync")
    if store_mod.Store(elastic_dir, RANK).commits()[-1] != 2:
        bad.append("the interrupted commit is not on disk")
    assert_everywhere(bad)


def test_run_syncs_resets_and_stops_for_new_hosts(elastic_dir, monkeypatch):
    params, opt, state = fresh(5 + RANK)
    calls = []
    state.register_reset_callbacks([lambda: calls.append(hvd.size())])

    @hvd.elastic.run
    def train(state, k):
        train_steps(params, opt, k, state)
        state.commit()
        return state.step

    bad = []
    if train(state, 2) != -5 + 2 or calls:      # first launch: synced to rank 0, no reset
        bad.append(f"first launch: step {state.step}, reset calls {calls}")
    monkeypatch.setenv("HVLITE_ELASTIC_RESTART", "1")
    params, opt, state = fresh(40 + RANK)
    state.register_reset_callbacks([lambda: calls.append(hvd.size())])
    if train(state, 1) != -5 + 3 or calls != [N]:  # a relaunch: from the commit, reset once
        bad.append(f"relaunch: step {state.step}, reset calls {calls}")
    if RANK == 0:
        open(os.path.join(elastic_dir, hvd.elastic.NOTICE), "w").close()
    hvd.barrier()
    try:
        train(state, 1)
        bad.append("new hosts did not stop the job")
    except SystemExit as e:
        if e.code != 0 or hvd.is_initialized():
            bad.append(f"stopped with {e.code}, hvlite initialized: {hvd.is_initialized()}")
    hvd.init()
    stopped = os.path.join(elastic_dir, hvd.elastic.STOPPED)
    if RANK == 0 and (not os.path.exists(stopped) or open(stopped).read() != str(state.commit_id)):
        bad.append("rank 0 left no note for hvliterun")
    monkeypatch.delenv("HVLITE_ELASTIC_RESTART")

    @hvd.elastic.run
    def broken(state):
        raise hvd.ShutdownError("outside hvliterun --elastic errors propagate")
    try:
        broken(state)
        bad.append("no exception")
    except hvd.elastic.HorovodInternalError:
        pass
    assert_everywhere(bad)


def test_state_arguments_are_checked():
    with pytest.raises(TypeError, match="params"):
        hvd.elastic.NumpyState({}, None, params=1)
    with pytest.raises(TypeError, match="state_dict"):
        hvd.elastic.NumpyState({}, object())
    state = hvd.elastic.NumpyState({"w": np.zeros(2)})
    state.save()
    with pytest.raises(ValueError, match="shape"):
        hvd.elastic.NumpyState({"w": np.zeros(3)})._apply(state._saved)
    with pytest.raises(ValueError, match="parameters"):
        hvd.elastic.NumpyState({"v": np.zeros(2)})._apply(state._saved)
