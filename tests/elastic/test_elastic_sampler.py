"""Horovod's ElasticSampler (hvlite/torch/sampler.py): alone, and carried by a TorchState's
commit from a launch of 2 ranks to a relaunch of 3, where what is left of the epoch is dealt
out again (tests/elastic/elastic_sampler_job.py)."""
import json
import random

import pytest

torch = pytest.importorskip("torch")
import hvlite.torch as hvd  # noqa: E402


def horovod_order(n, seed, epoch):
    """The epoch's order as Horovod's sampler makes it: a job moved over sees the same."""
    order = list(range(n))
    random.Random(seed + epoch).shuffle(order)
    return order


def test_one_rank_deals_the_epoch_and_checks_what_it_loads():
    hvd.init()
    s = hvd.elastic.ElasticSampler(list(range(10)), shuffle=True, seed=2)
    assert list(s) == horovod_order(10, 2, 0) and len(s) == 10
    s.record_batch(0, 4)
    s.load_state_dict(s.state_dict())
    assert list(s) == horovod_order(10, 2, 0)[4:] and len(s) == 6
    s.set_epoch(3)
    assert s.state_dict() == {"epoch": 3, "processed_num": 0}
    assert list(s) == horovod_order(10, 2, 3)
    assert list(hvd.elastic.ElasticSampler(range(5), shuffle=False)) == [0, 1, 2, 3, 4]
    for bad in ({"epoch": 1, "processed_num": -1}, {"epoch": "1", "processed_num": 0},
                {"epoch": 1}, {"epoch": True, "processed_num": 0}):
        with pytest.raises(ValueError, match="ElasticSampler"):
            s.load_state_dict(bad)
    assert s.state_dict() == {"epoch": 3, "processed_num": 0}


def read(out, n):
    return [json.load(open(f"{out}.{r}.json")) for r in range(n)]


def test_a_relaunch_at_another_size_deals_out_what_is_left(mpirun, tmp_path):
    env = {"HVLITE_ELASTIC_DIR": str(tmp_path / "commits")}
    mpirun(2, "tests/elastic/elastic_sampler_job.py", "first", str(tmp_path / "a"), env=env,
           pytest_module=False, timeout=120)
    mpirun(3, "tests/elastic/elastic_sampler_job.py", "rest", str(tmp_path / "b"), env=env,
           pytest_module=False, timeout=120)
    order = horovod_order(23, 5, 0)
    first, rest = read(tmp_path / "a", 2), read(tmp_path / "b", 3)
    # first launch: rank r takes order[r::2], in batches of 3; two batches each
    for r, got in enumerate(first):
        assert got["len"] == 12 and got["batches"] == [order[r::2][:3], order[r::2][3:6]], got
    done = sorted(i for got in first for b in got["batches"] for i in b)
    assert done == sorted(order[:12])
    # the relaunch: 11 left, dealt to 3 ranks (4 each, one padded from the start of what is left)
    left = order[12:]
    padded = left + left[:1]
    for r, got in enumerate(rest):
        assert (got["size"], got["epoch"], got["len"]) == (3, 0, 4), got
        assert [i for b in got["batches"] for i in b] == padded[r::3], (r, got)
    seen = sorted(i for got in rest for b in got["batches"] for i in b)
    assert sorted(set(seen)) == sorted(left) and len(seen) == 12     # every one, none done before
    # set_epoch at the end starts the next epoch's order from its first sample
    nxt = horovod_order(23, 5, 1)
    for r, got in enumerate(rest):
        assert got["next"] == nxt[r::3][:3], got


def test_horovods_own_sampler_walkthrough(monkeypatch):
    """Horovod's test_torch_elastic.py walk through the sampler, on one rank: record_batch
    counts, a loader run again without set_epoch repeats the epoch's rest, commit and restore
    bring the count back, sync keeps it, set_epoch starts again."""
    monkeypatch.delenv("HVLITE_ELASTIC_DIR", raising=False)
    hvd.init()
    batch_size, per_worker = 2, 8
    dataset = list(range(per_worker * hvd.size()))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    state = hvd.elastic.TorchState(sampler=sampler)
    state.sync()
    assert (state.sampler.epoch, state.sampler.processed_num) == (0, 0)
    total = 0
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for batch_idx, _ in enumerate(loader):
            sampler.record_batch(batch_idx, batch_size)
            assert sampler.processed_num == batch_size * (batch_idx + 1)
            total += 1
    assert total == per_worker // batch_size * 2
    assert sum(1 for _ in loader) == per_worker // batch_size      # no set_epoch: it repeats
    sampler.set_epoch(2)
    sampler.record_batch(0, batch_size)
    sampler.record_batch(1, batch_size)
    state.commit()
    sampler.record_batch(2, batch_size)
    sampler.record_batch(3, batch_size)
    state.restore()
    assert sampler.processed_num == 2 * batch_size
    sampler.record_batch(2, batch_size)
    state.commit()
    state.sync()
    assert sampler.processed_num == 3 * batch_size * hvd.size()
    assert len(sampler) == batch_size and sum(1 for _ in loader) == 1
    sampler.set_epoch(3)
    assert len(sampler) == per_worker
