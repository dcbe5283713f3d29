"""Rank side: the fp16/bf16 compressed all-reduce (the core's cast, an in-place reduction of the
wire buffer) equals the plain all-reduce of NumPy's cast, cast back, bit for bit, on every rank."""
import numpy as np
import pytest

import hvlite as hvd
from helpers import assert_identical_everywhere
from hvlite.compression import Compression

ml_dtypes = pytest.importorskip("ml_dtypes")
hvd.init()
WIRES = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}


@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum], ids=["average", "sum"])
@pytest.mark.parametrize("method", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", [(256, 256), (7,), (3, 1001)])
def test_compressed_allreduce_is_the_cast_allreduce(method, op, shape):
    rng = np.random.default_rng([hvd.rank(), len(shape)])
    g = (rng.standard_normal(shape) * 1e-4).astype(np.float32)
    name = f"cast.{method}.{int(op)}.{shape}"
    got = hvd.allreduce(g, op=op, name=name, compression=getattr(Compression, method))
    want = hvd.allreduce(g.astype(WIRES[method]), op=op, name=name + ".plain").astype(np.float32)
    assert got.dtype == np.float32 and got.shape == g.shape
    assert got.tobytes() == want.tobytes()
    assert_identical_everywhere(got, name)
