"""hvlite.route under MPI with stand-in device arrays: refusals reach every rank."""
ENV = {"HVLITE_PROBE": "0", "HVLITE_CUDA_CHUNK_BYTES": "4096"}


def test_device_refusals_reach_every_rank(mpirun):
    out = mpirun(3, "tests/gpu/mpi_gpu_route.py", env=ENV, timeout=120, pytest_module=False)
    assert out.count("route ok") == 3
