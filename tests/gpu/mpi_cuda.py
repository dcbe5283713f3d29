"""Rank side of the real-GPU checks (scripts/gpu_check.sh runs it on 2 ranks sharing a GPU).
Skips, with the reason, where CuPy or a GPU is absent."""
import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="CuPy is not installed (hvlite[cuda])")
try:
    if cupy.cuda.runtime.getDeviceCount() < 1:
        pytest.skip("no CUDA device", allow_module_level=True)
except cupy.cuda.runtime.CUDARuntimeError as e:
    pytest.skip(f"no usable CUDA device: {e}", allow_module_level=True)

import hvlite as hvd  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def job():
    hvd.init()
    yield
    hvd.shutdown()


@pytest.mark.parametrize("n", [1, 1000, 3_000_000])
def test_allreduce_on_the_device(n):
    r, size = hvd.rank(), hvd.size()
    x = cupy.arange(n, dtype=cupy.float32) + r
    got = hvd.allreduce(x, op=hvd.Sum, name=f"cuda.{n}")
    assert isinstance(got, cupy.ndarray) and got.device == x.device
    want = np.arange(n, dtype=np.float32) * size + sum(range(size))
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=1e-6)


def test_caller_stream_is_followed():
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        x = cupy.zeros(1 << 20, cupy.float32)
        x += 1 + hvd.rank()                 # queued on s, maybe not run yet at submit
        got = hvd.allreduce(x, op=hvd.Sum, name="cuda.stream")
        host = cupy.asnumpy(got, stream=s)
    s.synchronize()
    assert (host == sum(range(1, hvd.size() + 1))).all()


def test_torch_cuda_tensor():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    t = torch.full((1000,), float(hvd.rank()), device="cuda")
    got = hvd.allreduce(t, op=hvd.Sum, name="cuda.torch")
    assert isinstance(got, torch.Tensor) and got.is_cuda
    assert float(got[0]) == sum(range(hvd.size()))


def test_other_collectives():
    r, size = hvd.rank(), hvd.size()
    g = hvd.allgather(cupy.full((r + 1, 2), r, cupy.int32), name="cuda.ag")
    assert cupy.asnumpy(g).shape == (sum(range(1, size + 1)), 2)
    b = hvd.broadcast(cupy.full(5, r, cupy.float64), root_rank=0, name="cuda.bc")
    assert (cupy.asnumpy(b) == 0).all()
