"""Rank side (a plain script): init() with settings that differ between ranks, as mpiexec set
them per rank. HVLITE_TEST_EXPECT (JSON) says what every rank must see: the error's type and
fragments of its message ({last}: the last rank), or null for an init() that must succeed.
hvlite.init() runs before mpi4py.MPI is imported, so HVLITE_MPI_THREAD_LEVEL decides the level."""
import json
import os
import sys
import warnings

import numpy as np

import hvlite as hvd

expect = json.loads(os.environ["HVLITE_TEST_EXPECT"])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        hvd.init()
        outcome = ("ok", "")
    except Exception as e:  # noqa: BLE001 - every kind is reported below
        outcome = (type(e).__name__, str(e))
said = [str(w.message) for w in caught if "hvlite" in str(w.message)]

from mpi4py import MPI  # noqa: E402 - after init(), on purpose

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
problems = []
if expect["error"] is None:
    if outcome[0] != "ok":
        problems.append(f"init() raised {outcome[0]}: {outcome[1]}")
    else:
        got = hvd.allreduce(np.ones(3), op=hvd.Sum, name="after-init")
        if not np.array_equal(got, np.full(3, float(n))):
            problems.append(f"allreduce after init: {got}")
else:
    if outcome[0] != expect["error"]:
        problems.append(f"init() gave {outcome[0]}: {outcome[1]!r}, expected {expect['error']}")
    for frag in expect["fragments"]:
        frag = frag.format(last=n - 1)
        if frag not in outcome[1]:
            problems.append(f"message {outcome[1]!r} lacks {frag!r}")
    if hvd.is_initialized():
        problems.append("initialized after a failed init()")
want = expect.get("warning")      # rank 0 only warns, naming the closest known variable
if want and rank == 0 and not any(want in w for w in said):
    problems.append(f"no warning holding {want!r}: {said}")
if rank != 0 and said:
    problems.append(f"rank {rank} warned too: {said}")
print(f"rank {rank}: init() -> {outcome[0]}: {outcome[1]}; warnings {said}", flush=True)
everyone = comm.allgather(problems)
bad = [f"rank {r}: {p}" for r, ps in enumerate(everyone) for p in ps]
if bad:
    print("\n".join(bad), flush=True)
    sys.exit(1)
print("FAULT-CHECK OK", flush=True)
