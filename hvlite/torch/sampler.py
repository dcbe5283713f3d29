"""Horovod's ElasticSampler: a DistributedSampler whose place in the epoch is part of the
elastic state, so a relaunch with another number of ranks shares out what is left.

    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=B, sampler=sampler)
    state = hvd.elastic.TorchState(model, optimizer, train_sampler=sampler, epoch=0)

    for batch_idx, batch in enumerate(loader):
        ...step...
        state.train_sampler.record_batch(batch_idx, B)
        state.commit()
    state.train_sampler.set_epoch(epoch + 1)       # at the end of the epoch

The epoch's order is the same on every rank and in every launch (a permutation seeded with
seed + epoch, Horovod's: a job moved over from Horovod sees the same samples). What the state
saves is (epoch, samples done by all ranks together); restoring it, in any launch and at any
size, drops those from the epoch's order and deals the rest out again: rank r takes every
size-th sample from r on, the last round padded from the start of what is left.
"""
import math
import random

import torch.utils.data

from hvlite import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler(dataset, shuffle=True, seed=0) (the dataset's length fixed)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas, self.rank = 1, 0
        self.remaining_indices, self.num_samples, self.total_size = [], 0, 0
        self.reset()

    def set_epoch(self, epoch):
        """Start `epoch` from its first sample. Call it at the end of an epoch, not at the
        start: a commit in between would otherwise forget what the epoch had done."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Every rank finished a batch of `batch_size` samples (its own share of the step)."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        """Read back a state_dict (from a commit: checked, as anything read back is)."""
        epoch, done = state_dict.get("epoch"), state_dict.get("processed_num")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                   for v in (epoch, done)):
            raise ValueError(f"ElasticSampler.load_state_dict: epoch and processed_num must be "
                             f"integers >= 0, got {epoch!r} and {done!r}")
        self.epoch, self.processed_num = epoch, done
        self.reset()

    def reset(self):
        """Deal what is left of the epoch out to the ranks of the current job."""
        self.num_replicas, self.rank = size(), rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        left = self.remaining_indices
        padded = list(left)
        while left and len(padded) < self.total_size:      # (fewer left than ranks: repeat)
            padded += left[:self.total_size - len(padded)]
        return iter(padded[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples
