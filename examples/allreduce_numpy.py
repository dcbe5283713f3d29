"""The smallest framework-agnostic use: average a NumPy gradient across ranks.

    hvliterun -np 2 python examples/allreduce_numpy.py
"""
import numpy as np

import hvlite as hvd

hvd.init()
grad = np.full(4, float(hvd.rank()), dtype=np.float32)   # each rank's own gradient
avg = hvd.allreduce(grad, name="grad")                    # the same average on every rank
print(f"rank {hvd.rank()} of {hvd.size()}: {grad} -> {avg}")
