"""hvlite.torch (Horovod's torch surface) under mpiexec at 2 and 3 ranks."""
import re

import pytest


@pytest.mark.parametrize("n", [2, 3])
def test_torch_collectives(mpirun, n):
    pytest.importorskip("torch")
    mpirun(n, "tests/torch/mpi_torch_ops.py", timeout=240)


@pytest.mark.parametrize("n", [2, 3])
def test_torch_training(mpirun, n):
    pytest.importorskip("torch")
    mpirun(n, "tests/torch/mpi_torch_train.py", timeout=240)


def test_horovod_script_runs_with_only_the_import_changed(mpirun):
    """examples/horovod_compat.py: its code names hvlite only in the import line, and it trains."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    import ast
    import os
    from conftest import ROOT
    path = os.path.join(ROOT, "examples", "horovod_compat.py")
    src = open(path).read()
    doc = ast.get_docstring(ast.parse(src), clean=False)
    code = src.replace(doc, "")
    assert [ln for ln in code.splitlines() if "hvlite" in ln] == ["import hvlite.torch as hvd"]
    out = mpirun(2, "examples/horovod_compat.py", "--epochs", "10", "--sync-bn",
                 pytest_module=False, timeout=180)
    acc = float(out.split("accuracy ")[1].split("%")[0])
    assert acc >= 88.0 and "identical on every rank: True" in out, out


@pytest.mark.parametrize("n", [2, 3])
def test_torch_process_sets_and_compression(mpirun, n):
    pytest.importorskip("torch")
    mpirun(n, "tests/torch/mpi_torch_psets.py", timeout=120)


@pytest.mark.parametrize("n", [2, 3])
def test_torch_adapter_matches_the_numpy_optimizers(mpirun, n):
    pytest.importorskip("torch")
    mpirun(n, "tests/torch/mpi_torch_optimizer.py")


@pytest.mark.parametrize("n", [2, 3])
def test_long_lived_process_stays_healthy(mpirun, n):
    """Issue-style soak: >= 500 mixed operations with errors and three re-inits per process."""
    out = mpirun(n, "tests/torch/mpi_soak.py", pytest_module=False, timeout=300)
    lines = re.findall(r"SOAK rank=(\d+) ops=(\d+) rss_mb=(\[[^\]]*\])", out)
    assert len(lines) == n and all(int(ops) >= 500 for _, ops, _ in lines), out


def test_timeline_overlap_without_spans_by_hand(mpirun, tmp_path):
    """A Horovod user sets only the timeline variable: DistributedOptimizer records each step's
    compute itself, so the overlap report has compute spans to measure against."""
    pytest.importorskip("torch")
    out = mpirun(2, "tests/torch/mpi_torch_timeline.py", pytest_module=False, timeout=180,
                 env={"HVLITE_TIMELINE": str(tmp_path / "t.json")})
    assert "timeline compute spans ok" in out, out


def test_cuda_tensors_on_a_stand_in(mpirun):
    """hvlite.torch's CUDA route (operands, results, errors on every rank, compression,
    DistributedOptimizer) on host-backed stand-ins; tests/torch/mpi_torch_cuda.py runs the
    same on a GPU."""
    pytest.importorskip("torch")
    # auto left to the model: the device route's chunks and the host route's whole tensors
    # are compared bit for bit, and at 3 ranks two algorithms sum in different orders (auto's
    # trials would run several on one node)
    out = mpirun(3, "tests/torch/mpi_torch_device.py", timeout=240, pytest_module=False,
                 env={"HVLITE_PROBE": "0", "HVLITE_CUDA_CHUNK_BYTES": "4096",
                      "HVLITE_CALIBRATE": "0"})
    assert out.count("device ok") == 3


@pytest.mark.parametrize("n,aware", [(2, "0"), (3, "0"), (2, "1")])
def test_horovods_gpu_rules_on_a_stand_in(mpirun, n, aware):
    """What Horovod's test_torch.py asks of CUDA tensors and failed on a GPU: join with
    device all-reduces, float16 scaling in half precision, Adasum, CPU/GPU groups refused,
    alltoall's received splits like the splits given. With a CUDA-aware MPI (aware="1": the
    stand-in's host memory handed to MPI) a device all-reduce while a rank has joined takes
    the staged path, and its communicator is made before the first join: MPI's own ring, or
    its first Dup, would wait for the joined rank."""
    pytest.importorskip("torch")
    out = mpirun(n, "tests/torch/mpi_torch_device_rules.py", timeout=240, pytest_module=False,
                 env={"HVLITE_PROBE": "0", "HVLITE_CUDA_CHUNK_BYTES": "4096",
                      "HVLITE_CALIBRATE": "0", "HVLITE_CUDA_AWARE": aware})
    assert out.count("device rules ok") == n


def test_one_rank_as_horovod_has_it(mpirun):
    """DistributedOptimizer on one process: no hooks outside an elastic job, argument checks."""
    pytest.importorskip("torch")
    mpirun(1, "tests/torch/mpi_torch_one_rank.py", timeout=120)
