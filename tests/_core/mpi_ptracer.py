"""Run by test_ptracer.py on 2 and 3 ranks of one node: the direct path's ptracer is held while
a set uses cross-memory attach, set only where Yama's scope 1 needs it and the setting allows,
let in only the one peer where a process has one (two ranks; any process of the user where it
has more), and let go at shutdown. HVLITE_TEST_YAMA_SCOPE acts as if Yama's scope were that."""
import os
import sys

from hvlite._core.shm import cma

assumed = os.environ.get("HVLITE_TEST_YAMA_SCOPE")
if assumed is not None:
    cma._assume_yama_scope(int(assumed))

import hvlite as hvd  # noqa: E402
from hvlite._core.shm.cma import ptracer_state, ptracer_target  # noqa: E402

allowed = os.environ.get("HVLITE_SHM_PTRACER", "1") != "0"
hvd.init(process_sets="dynamic")
rank, size = hvd.rank(), hvd.size()
holds, is_set, scope = ptracer_state()
scope = int(assumed) if assumed is not None else scope
pids = hvd.allgather_object(os.getpid())
target = ptracer_target()
print(f"rank {rank}: holds {holds} set {is_set} scope {scope} target {target}", flush=True)
assert holds >= 1, "the direct path runs on one node, so a context holds the ptracer"
if assumed is None:
    assert is_set == (allowed and scope == 1), (is_set, allowed, scope)
want = (pids[1 - rank] if size == 2 else -1) if allowed and scope == 1 else 0
assert target == want, (target, want, pids)
if size > 2:
    ps = hvd.add_process_set([0, 1])
    assert ptracer_state()[0] == holds + (rank < 2), ptracer_state()   # a second set's too
    assert ptracer_target() == want, (ptracer_target(), want)          # one peer: still any
    hvd.remove_process_set(ps)
    assert ptracer_state()[0] == holds, ptracer_state()
hvd.shutdown()
holds, is_set, scope = ptracer_state()
assert holds == 0 and not is_set and ptracer_target() == 0, (holds, is_set, ptracer_target())
print(f"rank {rank}: released", flush=True)
sys.exit(0)
