"""Rank side of test_elastic_sampler.py, one launch of a job whose ElasticSampler rides in a
TorchState committed to files: `first` takes two batches per rank, committing after each, and
stops; `rest` (a relaunch, at another size) syncs and takes every batch left, then the next
epoch's first batch. Each rank writes the indices it was dealt (by batch) to OUT.rank.json."""
import json
import os
import sys

import torch

import hvlite.torch as hvd

phase, out = sys.argv[1], sys.argv[2]
hvd.init()
dataset = torch.utils.data.TensorDataset(torch.arange(23))
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=5)
loader = torch.utils.data.DataLoader(dataset, batch_size=3, sampler=sampler)
state = hvd.elastic.TorchState(None, None, train_sampler=sampler, epoch=0)
state.sync()
assert state.train_sampler is sampler
got = {"size": hvd.size(), "epoch": sampler.epoch, "len": len(sampler), "batches": []}
for batch_idx, (x,) in enumerate(loader):
    got["batches"].append(x.tolist())
    state.train_sampler.record_batch(batch_idx, 3)
    state.commit()
    if phase == "first" and batch_idx == 1:
        break
if phase == "rest":
    sampler.set_epoch(1)
    state.epoch = 1
    state.commit()
    got["next"] = next(iter(loader))[0].tolist()
with open(f"{out}.{hvd.rank()}.json", "w") as f:
    json.dump(got, f)
hvd.shutdown()
os._exit(0)
