"""Run by test_process_sets.py: process sets made from mpi4py communicators, as in Horovod
(`hvd.init(process_sets=[hvd.ProcessSet(comm)])`, each rank passing its own communicator from
Split, MPI's COMM_NULL where a rank is in no such set). init() makes one set of every distinct
group, in the order of the lowest rank holding it, and each rank's object becomes its own."""
import numpy as np
from mpi4py import MPI

import hvlite as hvd
from helpers import assert_everywhere

w = MPI.COMM_WORLD
r, n = w.Get_rank(), w.Get_size()
parity = w.Split(r % 2, r)
first = w.Split(0 if r == 0 else MPI.UNDEFINED, r)
mine, solo = hvd.ProcessSet(parity), hvd.ProcessSet(first)
fails = []
if mine.ranks is not None or mine.included() is not None or mine.mpi_comm is not parity:
    fails.append(f"before init: ranks {mine.ranks}, included {mine.included()}")
hvd.init(process_sets=[mine, solo, [0, 1]])
want = [q for q in range(n) if q % 2 == r % 2]
if mine.ranks != want or not mine.included() or mine.size() != len(want):
    fails.append(f"own set: ranks {mine.ranks}, size {mine.size()}")
groups = [ps.ranks for ps in hvd._current().registry.sets()]
expected = [list(range(n)), [q for q in range(n) if q % 2 == 0],
            [q for q in range(n) if q % 2 == 1], [0], [0, 1]]
if groups != expected:
    fails.append(f"registered {groups}, expected {expected}")
got = hvd.allreduce(np.array([float(r)]), op=hvd.Sum, process_set=mine, name="by.parity")
if got[0] != sum(want):
    fails.append(f"allreduce on the set gave {got[0]}, expected {sum(want)}")
if (solo.ranks, solo.process_set_id is not None) != (([0], True) if r == 0 else (None, False)):
    fails.append(f"COMM_NULL's set: ranks {solo.ranks}, id {solo.process_set_id}")
hvd.shutdown()
# init() reads its process sets twice (their ranks, then to register them): a generator works
hvd.init(process_sets=(hvd.ProcessSet(c) for c in (parity,)))
groups = [ps.ranks for ps in hvd._current().registry.sets()]
if groups != expected[:3]:
    fails.append(f"from a generator: registered {groups}")
assert_everywhere(fails)
print(f"rank {r}: sets from communicators ok", flush=True)
hvd.shutdown()
