"""fp16/bf16 compression through the core's cast kernel: the payload and the decoded tensor are
NumPy's astype bits, dtypes and shapes kept; other dtypes take NumPy's path. Under mpiexec the
compressed all-reduce equals the plain all-reduce of the cast tensor, cast back, bit for bit."""
import numpy as np
import pytest

from hvlite.compression import Compression
from hvlite.compression.cast import cast

ml_dtypes = pytest.importorskip("ml_dtypes")
WIRES = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}


def gradient(shape=(64, 33), scale=1e-5, seed=0):
    """Gradient-sized values: many fall into float16's subnormal range (NumPy's slow case)."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("method", ["fp16", "bf16"])
@pytest.mark.parametrize("scale", [1e-5, 1.0, 1e5])
def test_payload_and_decoded_tensor_are_astype_bits(method, scale):
    c, wire = getattr(Compression, method), WIRES[method]
    x = gradient(scale=scale)
    payload, ctx = c.compress(x, "t")
    with np.errstate(all="ignore"):
        want = x.astype(wire)
    assert len(payload) == 1 and same_bits(payload[0], want)
    assert same_bits(c.decompress(payload, ctx), want.astype(np.float32))


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_other_dtypes_and_layouts_take_numpys_path(dtype):
    x = gradient().astype(dtype)
    payload, ctx = Compression.fp16.compress(x[:, ::2], "t")        # not contiguous either
    assert same_bits(payload[0], x[:, ::2].astype(np.float16))
    assert same_bits(Compression.fp16.decompress(payload, ctx), payload[0].astype(dtype))


def test_cast_keeps_0d_and_empty_arrays():
    for x in (np.float32(3.5) * np.ones(()), np.zeros((0, 4), np.float32)):
        assert same_bits(cast(x, WIRES["fp16"]), x.astype(np.float16))


@pytest.mark.parametrize("round16", ["1", "0"])
def test_compressed_allreduce_bits(mpirun, round16):
    """On one node the compressors round inside the reduction; with that off they cast, as
    across nodes, and both ways must keep every rule here."""
    mpirun(2, "tests/compression/mpi_cast.py", timeout=120,
           env={"HVLITE_COMPRESSION_ROUND_IN_REDUCTION": round16})


@pytest.mark.parametrize("n, algorithm, on", [(2, "shm", 1), (3, "shm", 1), (5, "shm", 1),
                                              (3, "ring", 1), (2, "mpi", 1), (2, "shm", 0)])
def test_on_one_node_float32_is_reduced_as_16_bits(mpirun, n, algorithm, on):
    """fp16/bf16 on one node rounds inside the reduction of the float32 arrays: NumPy's 16-bit
    sum, bit for bit on 2 ranks, within its roundings on more (through the segment, ring, and
    MPI's own all-reduce with user-defined ops); turned off, the casts' way gives the same bits."""
    mpirun(n, "tests/compression/mpi_round16.py", timeout=180,
           env={"HVLITE_ALLREDUCE_ALGORITHM": algorithm, "EXPECT_ROUND16": str(on),
                "HVLITE_COMPRESSION_ROUND_IN_REDUCTION": str(on)})
