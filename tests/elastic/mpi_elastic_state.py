"""Rank side: hvlite.elastic's states on real files under mpiexec. A relaunch is simulated in one
process by new state objects (with other values) and sync(); the failures a real relaunch meets
are made by hand: a commit only some ranks wrote, a rank with no directory, a directory left
from an older launch holding a commit of the same id with other content.

HVLITE_TEST_ELASTIC_BASE: a directory every rank sees; each test commits in its own below it."""
import datetime
import errno
import os
import pickle
import stat
import warnings

import numpy as np
import pytest

import hvlite as hvd
from helpers import assert_everywhere, expect_raise_everywhere
from hvlite.elastic import codec
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
    meta, payload = codec.decode(mine.read(3))
    if meta["commit"] != 3 or meta["size"] != N or not same(payload["params"], want):
        bad.append(f"commit 3 on disk is not the state committed: {meta}")
    train_steps(params, opt, 1, state)           # after the commit: lost in the relaunch
    params2, opt2, state2 = fresh(50 + RANK)     # the relaunch
    state2.sync()
    if not same(params2, want) or state2.step != -1 + 6 or state2.commit_id != 3:
        bad.append(f"relaunch restored step {state2.step}, commit {state2.commit_id}")
    if opt2.steps != 6 or not same({k: v["momentum"] for k, v in opt2.state.items()},
                                   {k: v["momentum"] for k, v in codec.decode(
                                       mine.read(3))[1]["optimizer"]["state"].items()}):
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
        mine.write(3, codec.encode({"commit": 3, "size": N}, state._capture()))
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
        mine.write(2, codec.encode({"commit": 2, "size": N}, fresh(99)[2]._capture()))
        mine.set_generation(0)
    hvd.barrier()
    params2, opt2, state2 = fresh(20 + RANK)
    state2.sync()
    bad = []
    if state2.commit_id != 2 or not same(params2, want) or state2.restored["root"] != 0:
        bad.append(f"restored {state2.restored}")
    if mine.commits() != [2] and RANK != 0:
        bad.append(f"holds {mine.commits()} after sync")
    if not same(codec.decode(mine.read(2))[1]["params"], want):
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


def test_new_hosts_note_is_written_through_no_planted_link(elastic_dir, monkeypatch):
    """rank 0's note for hvliterun (STOPPED) replaces a symbolic link planted at its name."""
    params, opt, state = synced_and_committed(4, [1])
    monkeypatch.setenv("HVLITE_ELASTIC_RESTART", "1")
    victim = os.path.join(BASE, "stopped-victim")
    stopped = os.path.join(elastic_dir, hvd.elastic.STOPPED)
    if RANK == 0:
        with open(victim, "w") as f:
            f.write("precious")
        os.symlink(victim, stopped)
        open(os.path.join(elastic_dir, hvd.elastic.NOTICE), "w").close()
    hvd.barrier()
    bad = []
    try:
        hvd.elastic.run(lambda st: st.commit())(state)
        bad.append("new hosts did not stop the job")
    except SystemExit:
        pass
    hvd.init()
    if RANK == 0:
        st = os.lstat(stopped)
        if open(victim).read() != "precious" or not stat.S_ISREG(st.st_mode) or \
                stat.S_IMODE(st.st_mode) != 0o600 or open(stopped).read() != "2":
            bad.append(f"STOPPED followed the link or is not private: {oct(st.st_mode)}")
    assert_everywhere(bad)


class Payload:
    """What a planted commit holds: unpickling it writes the marker file (a stand-in for any
    code an attacker would run)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def test_a_planted_commit_is_refused_on_every_rank_and_runs_nothing(elastic_dir):
    params, opt, state = synced_and_committed(31, [1])
    want = {k: v.copy() for k, v in params.items()}
    marker = os.path.join(BASE, "planted-marker")
    mine = store_mod.Store(elastic_dir, RANK)
    # commit 2 in every rank's directory, beside the generation file: agree() picks it; its
    # header and checksum are right (anyone can compute them), its body runs code
    body = pickle.dumps({"params": want, "optimizer": None, "objects": Payload(marker)},
                        protocol=5)
    store_mod.write_atomic(mine.commit_path(2), store_mod.frame({"commit": 2, "size": N}, body))
    hvd.barrier()
    planted = store_mod.Store(elastic_dir, 0).commit_path(2)
    expect_raise_everywhere(lambda: fresh(40 + RANK)[2].sync(), hvd.elastic.CommitError,
                            f"rank 0 cannot offer commit 2", planted, "builtins.exec", "refused")
    hvd.barrier()
    bad = [] if not os.path.exists(marker) else ["the planted commit ran its code"]
    # the runtime is still right: a collective, and a sync once the file is gone
    total = hvd.allreduce(np.full(3, RANK + 1.0), op=hvd.Sum)
    if not np.array_equal(total, np.full(3, N * (N + 1) / 2)):
        bad.append("allreduce after the refusal")
    os.unlink(mine.commit_path(2))
    hvd.barrier()
    params2, opt2, state2 = fresh(50 + RANK)
    state2.sync()
    if state2.commit_id != 1 or not same(params2, want):
        bad.append(f"after removing the planted file: commit {state2.commit_id}")
    assert_everywhere(bad)


def test_arbitrary_objects_need_trusted(elastic_dir):
    when = datetime.date(2020, 1, 2)
    state = hvd.elastic.ObjectState(step=0, when=when)
    state.sync()
    expect_raise_everywhere(state.commit, hvd.elastic.CommitError, "commit 1 failed",
                            *[f"rank {r}: CommitError: cannot commit a datetime.date at "
                              f"state['when']" for r in range(N)], "trusted=True")
    bad = []
    if state.commit_id != 0 or store_mod.Store(elastic_dir, RANK).commits():
        bad.append(f"a refused commit left commit id {state.commit_id} or a file")
    trusted = hvd.elastic.ObjectState(step=0, when=when, trusted=True)
    trusted.sync()
    trusted.step = 5
    trusted.commit()
    again = hvd.elastic.ObjectState(step=-1, when=None, trusted=True)
    again.sync()
    if (again.step, again.when, again.commit_id) != (5, when, 1):
        bad.append(f"trusted state restored {again.step}, {again.when}, {again.commit_id}")
    # the same commit, read without the opt-in, is refused everywhere
    expect_raise_everywhere(hvd.elastic.ObjectState(step=0, when=None).sync,
                            hvd.elastic.CommitError, "datetime.date", "refused")
    assert_everywhere(bad)


def test_a_torn_newest_commit_falls_back_to_the_newest_whole_one(elastic_dir):
    params, opt, state = synced_and_committed(61, [1, 1])
    want = {k: v.copy() for k, v in params.items()}          # commit 2
    train_steps(params, opt, 1, state)
    state.commit()                                           # commit 3
    mine = store_mod.Store(elastic_dir, RANK)
    torn = mine.commit_path(3)
    if RANK == 1:                                            # half of it reached the disk
        data = open(torn, "rb").read()
        with open(torn, "r+b") as f:
            f.truncate(len(data) // 2)
    hvd.barrier()
    params2, opt2, state2 = fresh(70 + RANK)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state2.sync()
    said = [str(w.message) for w in caught if issubclass(w.category, hvd.elastic.CommitWarning)]
    bad = []
    if RANK == 1 and not (len(said) == 1 and torn in said[0] and "torn" in said[0]):
        bad.append(f"warnings {said}")
    if RANK != 1 and said:
        bad.append(f"warnings {said}")
    if state2.commit_id != 2 or not same(params2, want) or state2.step != -61 + 2:
        bad.append(f"restored commit {state2.commit_id}, step {state2.step}")
    if mine.commits() != [2]:
        bad.append(f"holds {mine.commits()} after sync")
    train_steps(params2, opt2, 1, state2)
    state2.commit()                                          # and it goes on
    if mine.intact_commits() != [2, 3]:
        bad.append(f"after the next commit: {mine.commits()}")
    assert_everywhere(bad)


def test_survivors_sharing_no_commit_keep_theirs(elastic_dir):
    if N < 2:
        pytest.skip("needs two survivors")
    params, opt, state = synced_and_committed(81, [1, 1, 1])
    mine = store_mod.Store(elastic_dir, RANK)
    damaged = {0: 3, 1: 2}.get(RANK)              # rank 0 holds 2 whole, rank 1 holds 3
    if damaged:
        with open(mine.commit_path(damaged), "r+b") as f:
            f.truncate(10)
    hvd.barrier()
    params2, opt2, state2 = fresh(90 + RANK)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state2.sync()
    said = [str(w.message) for w in caught if issubclass(w.category, hvd.elastic.CommitWarning)]
    bad = []
    if state2.commit_id != 0 or not same(params2, model(90)):
        bad.append(f"restored {state2.restored}: not rank 0's state")
    aside = os.path.join(mine.path, "set-aside-2")
    if mine.commits() or sorted(os.listdir(aside)) != ["commit-0000000002.pkl",
                                                       "commit-0000000003.pkl"]:
        bad.append(f"holds {mine.commits()}, set aside {os.listdir(mine.path)}")
    if not any("no commit in common" in m and aside in m for m in said):
        bad.append(f"no warning naming {aside}: {said}")
    assert_everywhere(bad)


def test_a_commit_failing_on_one_rank_fails_on_every_rank(elastic_dir, monkeypatch):
    params, opt, state = synced_and_committed(13, [1])

    def full(self, commit_id, chunks):
        raise OSError(errno.ENOSPC, "No space left on device")
    with monkeypatch.context() as patch:
        if RANK == N - 1:
            patch.setattr(store_mod.Store, "write", full)
        expect_raise_everywhere(state.commit, hvd.elastic.CommitError, "commit 2 failed",
                                f"rank {N - 1}: OSError: [Errno {errno.ENOSPC}] No space left")
    bad = [] if state.commit_id == 1 else [f"commit id {state.commit_id} after a failed commit"]
    train_steps(params, opt, 1, state)
    state.commit()
    if state.commit_id != 2:
        bad.append(f"the next commit is {state.commit_id}")
    assert_everywhere(bad)


def test_a_directory_of_another_user_fails_sync_on_every_rank(elastic_dir, monkeypatch):
    synced_and_committed(17, [1])
    hvd.barrier()
    real = os.geteuid()
    with monkeypatch.context() as patch:
        if RANK == N - 1:
            patch.setattr(store_mod.os, "geteuid", lambda: real + 1)
        expect_raise_everywhere(fresh(18)[2].sync, hvd.elastic.CommitError,
                                f"rank {N - 1}: UnsafeDirectoryError", "not to this user")
    state = fresh(19)[2]
    state.sync()
    assert_everywhere([] if state.commit_id == 1 else [f"restored {state.commit_id}"])


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
