"""Device collectives end to end under MPI, on host-backed stand-ins for device arrays: the
staged path and the CUDA-aware path (whose ring runs here over host memory), and the ring
itself against the core."""
import pytest

ENV = {"HVLITE_PROBE": "0", "HVLITE_CUDA_CHUNK_BYTES": "4096"}


@pytest.mark.parametrize("aware", ["0", "1"])
def test_device_collectives(mpirun, aware):
    out = mpirun(3, "tests/gpu/mpi_gpu_staged.py", env=dict(ENV, HVLITE_CUDA_AWARE=aware),
                 timeout=120, pytest_module=False)
    assert out.count(f"ok ({aware})") == 3


def test_device_ring_matches_the_core(mpirun):
    out = mpirun(3, "tests/gpu/mpi_gpu_ring.py", env=ENV, timeout=180, pytest_module=False)
    assert out.count("ring ok") == 3
