"""A rank fails instead of registering or removing a process set (tests/test_process_sets.py):
the others' add_process_set / remove_process_set must end with hvlite's error, not wait for
ever. argv[1]: 'add' (rank 1 raises, rank 0 adds [0, 1]), 'doc-as-was' (docs/process_sets.md's
first snippet as it once read: ranks 1 and 3 raise on the broadcast to the evens, 0 and 2
go on to remove_process_set), 'doc' (the snippet as it reads now, run to the end)."""
import sys

import numpy as np

import hvlite as hvd

case = sys.argv[1]
evens = hvd.ProcessSet([0, 2])
hvd.init(process_sets=[evens] if case.startswith("doc") else None)
x = np.full(4, float(hvd.rank()), np.float32)
try:
    if case == "add":
        if hvd.rank() == 1:
            raise RuntimeError("rank 1 fails before add_process_set")
        hvd.add_process_set([0, 1])
    else:
        odds = hvd.add_process_set([1, 3])
        mine = evens if hvd.rank() % 2 == 0 else odds
        avg = hvd.allreduce(x, process_set=mine)
        assert np.all(avg == (1.0 if hvd.rank() % 2 == 0 else 2.0)), avg
        if case == "doc-as-was" or evens.included():
            hvd.broadcast(x, root_rank=2, process_set=evens)
        hvd.remove_process_set(odds)
        print(f"rank {hvd.rank()}: done", flush=True)
except hvd.HvliteError as e:
    print(f"rank {hvd.rank()}: {type(e).__name__}: {e}", flush=True)
    sys.exit(1)
