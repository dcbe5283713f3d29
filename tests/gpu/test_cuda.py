"""Real-GPU checks: tests/gpu/mpi_cuda.py on 2 ranks sharing one GPU. Skipped, with the reason,
without CuPy or a CUDA device."""
import importlib.util

import pytest


def _why_not():
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed (pip install hvlite[cuda]); GPU checks did not run"
    import cupy
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device; GPU checks did not run"
    except Exception as e:
        return f"no usable CUDA device ({e}); GPU checks did not run"
    return None


@pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")
def test_gpu_collectives_on_two_ranks(mpirun):
    mpirun(2, "tests/gpu/mpi_cuda.py", timeout=300)


def _torch_why_not():
    why = _why_not()
    if why is not None:
        return why
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed; torch CUDA checks did not run"
    import torch
    return None if torch.cuda.is_available() else "torch has no CUDA here; checks did not run"


@pytest.mark.skipif(_torch_why_not() is not None, reason=_torch_why_not() or "")
def test_torch_cuda_tensors(mpirun):
    out = mpirun(2, "tests/torch/mpi_torch_cuda.py", timeout=300, pytest_module=False)
    assert out.count("torch cuda ok") == 2
