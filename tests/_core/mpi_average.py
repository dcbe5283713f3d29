"""Rank side of tests/_core/test_average.py: an Average is its Sum divided by the set's size,
bit for bit, on every path its division may be fused into (the shared segment's in-place,
redundant and sliced passes, fused batches through the slots, the peers' buffers read directly,
the nodes' sum across emulated nodes, the owner's block in ring, rhd, rd and tree), for every
dtype that divides, sizes around the chunk and segment edges, in and out of place.
AVERAGE_ALGORITHMS: the algorithms to run (default shm)."""
import os
import sys

import numpy as np

import hvlite as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
fails = []
SEG = hvd._current().shm_info.get("segment_bytes") or (1 << 20)


def divided(s, dtype):
    """The core's division of a Sum result: floats in their own precision (16-bit ones through
    float32), integers truncated toward zero."""
    if dtype.kind == "f" or dtype.name == "bfloat16":
        wide = np.float64 if dtype == np.float64 else np.float32
        return (s.astype(wide) / wide(n)).astype(dtype)
    q = np.abs(s.astype(np.int64)) // n
    return (np.sign(s.astype(np.int64)) * q).astype(dtype)


def data(size, dtype, k):
    g = np.random.default_rng(1000 * r + k)
    if dtype.kind in "iu":
        return g.integers(-50 if dtype.kind == "i" else 0, 50, size).astype(dtype)
    return (g.standard_normal(size) * 10).astype(dtype)


dtypes = [np.dtype(t) for t in (np.float32, np.float64, np.float16, np.int32, np.int8)]
try:
    import ml_dtypes
    dtypes.append(np.dtype(ml_dtypes.bfloat16))
except ImportError:
    pass
sizes = [1, 17, 1000, 4096 + 3, SEG // 4 + 5, 3 * SEG // 4 + 11]
for alg in os.environ.get("AVERAGE_ALGORITHMS", "shm").split(","):
    # Fused batches only where a batch's makeup cannot move its rounding: the segment reduces
    # in slot order wherever a tensor lands; ring, rhd and tree reduce each block from another
    # rank on, and which tensors a round fuses, in which order, differs from call to call.
    forms = ["out of place", "in place"]
    if alg == "shm" and hvd.local_size() == n:
        forms.append("fused batch")
    for dt in dtypes:
        for size in sizes:
            if dt.itemsize * size > 4 * SEG:
                continue
            x = data(size, dt, size)
            tag = f"{alg} {dt.name} {size}"
            for how in forms:
                res = {}
                for op in (hvd.Sum, hvd.Average):     # the same form and algorithm, each op
                    name = f"{how}.{op.name}.{tag}"
                    if how == "out of place":
                        res[op] = hvd.allreduce(x, op=op, name=name, algorithm=alg)
                    elif how == "in place":
                        res[op] = hvd.allreduce_(x.copy(), op=op, name=name, algorithm=alg)
                    else:
                        hs = [hvd.allreduce_async(x, op=op, name=f"{name}.{k}", algorithm=alg)
                              for k in range(3)]
                        res[op] = [h.synchronize() for h in hs][1]
                g, want = res[hvd.Average], divided(res[hvd.Sum], dt)
                if g.dtype != dt or g.tobytes() != want.tobytes():
                    fails.append(f"{how} {tag}")
print(f"rank {r}: {'FAIL ' + ', '.join(fails[:8]) if fails else 'average ok'}", flush=True)
hvd.shutdown()
sys.exit(1 if fails else 0)
