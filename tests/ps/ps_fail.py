"""A parameter-server job where one rank fails (argv[1]): 'worker' raises, 'server' raises in
its optimizer, 'server-exit' vanishes without a word. Every rank must end, none may hang."""
import os
import sys

import numpy as np

import hvlite.ps as ps
from hvlite.optim import SGD
from mpi4py import MPI

RANK = MPI.COMM_WORLD.Get_rank()
how = sys.argv[1]


class FailingSGD(SGD):
    def step(self, params, grads):
        if self.steps == 3:
            if how == "server-exit":
                os._exit(3)
            raise FloatingPointError("optimizer blew up at step 3")
        super().step(params, grads)


params = {"w": np.zeros(10)}
job = ps.init(params, FailingSGD(0.1), mode="sync", servers=1)
if job.is_server:
    job.serve()
else:
    for step in range(50):
        job.pull()
        if how == "worker" and RANK == 1 and step == 3:
            raise ValueError("bad batch on purpose")
        job.push({"w": np.ones(10)})
    job.close()
print(f"rank {RANK} finished normally", flush=True)
