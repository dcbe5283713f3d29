"""Training on top of hvlite's collectives: optimizers over named arrays, the distributed
wrapper that overlaps gradient all-reduces with the backward pass, and learning-rate rules."""
from hvlite.optim.distributed import (DistributedOptimizer, LocalSGD, broadcast_optimizer_state,
                                      broadcast_parameters)
from hvlite.optim.optimizers import LAMB, LARS, SGD, Adam, Optimizer
from hvlite.optim.schedules import scaled_lr, warmup_lr

__all__ = ["DistributedOptimizer", "LocalSGD", "broadcast_parameters", "broadcast_optimizer_state",
           "Optimizer", "SGD", "Adam", "LARS", "LAMB", "scaled_lr", "warmup_lr"]
