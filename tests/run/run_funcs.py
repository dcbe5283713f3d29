"""Functions hvlite.run.run() runs on its ranks in tests/run/test_run_api.py (importable by the
ranks, which get the caller's sys.path)."""
import numpy as np


def ranked_sum(scale, offset=0):
    import hvlite as hvd
    hvd.init()
    total = hvd.allreduce(np.array([hvd.rank() * scale + offset], np.float64), op=hvd.Sum)
    out = (hvd.rank(), hvd.size(), float(total[0]))
    hvd.shutdown()
    return out


def fails_on_rank_1():
    import hvlite as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank 1 fails on purpose")
    hvd.barrier()
