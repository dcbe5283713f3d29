"""Rank side: across hosts a size class tries only what the model predicts within 1.4x of its best
(execute/dispatch.pyx, CROSS_SPREAD), and only what did not lose by over 1.5x in a measured class
nearby, and that class's pick (tuning/calibrate.pyx, NEAR).

`python mpi_calibrate_hosts.py`: ring's trials at 1 MiB record 4x their time (so ring loses
there), then calls at 2 MiB (the next class) run until it has a pick; rank 0 prints
`near <1 MiB entry> | <2 MiB entry>` as JSON, and every rank checks the rule. Run with the
cost model pinned (HVLITE_PROBE=0), whose figures make ring a candidate at 1 MiB on any machine."""
import json

import numpy as np

import hvlite as hvd
from hvlite._core.tuning.cost_model import predict_seconds

hvd.init()
coord = hvd._current().global_state.coordinator


def measure(nbytes, name, most=200):
    x = np.ones(nbytes // 4, np.float32)
    cls = 1 << (nbytes.bit_length() - 1)
    for _ in range(most):
        if cls in coord.calibration():
            return coord.calibration()[cls]
        h = hvd.allreduce_async_(x, op=hvd.Sum, name=name)
        h.wait()
        hvd.synchronize(h)
        assert np.all(x == hvd.size()), (nbytes, x[:4])
        x[:] = 1
    raise SystemExit(f"class {cls} not measured after {most} calls")


coord._scale_trials(4.0, "ring")
low = measure(1 << 20, "near.low")
coord._scale_trials(1.0)
high = measure(2 << 20, "near.high")
assert "ring" in low["calls"], f"ring is not among 1 MiB's candidates: {low}"   # the pinned model
lost = {a for a, s in low["seconds"].items() if s > 1.5 * low["seconds"][low["pick"]]}
tried = set(high["calls"]) if high["calls"] else {high["pick"]}
problems = []
rt = hvd._current()
model = coord.cost_model()
predicted = {a: predict_seconds(a, 1 << 20, hvd.size(), model, nodes=rt.engine.cross_size,
                                local_size=rt.engine.local_size) for a in low["calls"]}
best = min(predict_seconds(a, 1 << 20, hvd.size(), model, nodes=rt.engine.cross_size,
                           local_size=rt.engine.local_size) for a in ("ring", "rhd", "rd", "shm"))
far = sorted(a for a, p in predicted.items() if p > 1.4 * best)
if far:     # the pinned model puts rd at 1.7x shm at 1 MiB on 2 hosts of 2 ranks
    problems.append(f"1 MiB tried {far}, predicted over 1.4x the best ({predicted}, best {best})")
if "ring" not in lost:
    problems.append("ring's 4x trials did not lose at 1 MiB")
if tried & lost:
    problems.append(f"2 MiB tried {sorted(tried & lost)}, which lost by over 1.5x at 1 MiB")
if low["pick"] not in tried:
    problems.append(f"2 MiB did not try 1 MiB's pick {low['pick']}")
if hvd.rank() == 0:
    print("near " + json.dumps(low) + " | " + json.dumps(high), flush=True)
assert not problems, problems
hvd.shutdown()
