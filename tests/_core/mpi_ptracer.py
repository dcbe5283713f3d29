"""Run by test_ptracer.py on 3 ranks of one node: the direct path's ptracer is held while a set
uses cross-memory attach, set only where Yama's scope 1 needs it and the setting allows, and let
go at shutdown."""
import os
import sys

import hvlite as hvd
from hvlite._core.shm.cma import ptracer_state

allowed = os.environ.get("HVLITE_SHM_PTRACER", "1") != "0"
hvd.init(process_sets="dynamic")
rank = hvd.rank()
holds, is_set, scope = ptracer_state()
print(f"rank {rank}: holds {holds} set {is_set} scope {scope}", flush=True)
assert holds >= 1, "the direct path runs on one node, so a context holds the ptracer"
assert is_set == (allowed and scope == 1), (is_set, allowed, scope)
ps = hvd.add_process_set([0, 1])
assert ptracer_state()[0] == holds + (rank < 2), ptracer_state()   # a second set's context too
hvd.remove_process_set(ps)
assert ptracer_state()[0] == holds, ptracer_state()
hvd.shutdown()
holds, is_set, scope = ptracer_state()
assert holds == 0 and not is_set, (holds, is_set)
print(f"rank {rank}: released", flush=True)
sys.exit(0)
