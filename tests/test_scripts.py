"""The benchmark scripts still run against the current package (a few steps each, at 2 ranks):
they reach into the runtime, so a refactor that breaks them shows here rather than on the day
someone reruns the figures. Timing is not checked."""
import pytest

SCRIPTS = [
    (["scripts/bench_allreduce.py", "--sizes", "4K,1M", "--budget", "0.05",
      "--algorithms", "mpi,ring,shm"], "auto ran"),
    (["scripts/bench_small.py", "--sizes", "4K", "--calls", "5", "--reps", "2"], "MPI_Barrier"),
    (["scripts/bench_fusion.py", "--steps", "2"], "hvlite-fused-inplace"),
    (["scripts/bench_torch.py", "--reps", "3"], "torch / NumPy"),
    (["scripts/bench_training_numpy.py", "--steps", "2"], "efficiency"),
    (["scripts/bench_training.py", "--models", "mlp", "--rounds", "1", "--steps", "1",
      "--warmup", "1"], "hvlite / DDP"),
    (["scripts/bench_training.py", "--models", "mlp", "--modes", "apart,hvlite", "--rounds", "1",
      "--steps", "1", "--warmup", "1"], "| no communication (every rank alone) |"),
    (["scripts/bench_training.py", "--models", "mlp", "--modes", "ddp,hvlite", "--rounds", "1",
      "--steps", "1", "--warmup", "1", "--cpu"], "| training thread, ms | other threads, ms |"),
    (["scripts/bench_average.py", "--sizes", "4K", "--reps", "2"], "Average / Sum"),
    (["scripts/bench_unnamed.py", "--calls", "3", "--steps", "5", "--reps", "2"], "unnamed / named"),
    (["scripts/bench_cast.py", "--sizes", "1001", "--repeats", "3"], "kernel"),
    (["scripts/bench_after_compute.py", "--compute-ms", "0,1", "--reps", "2", "--settle", "2"],
     "first 2:"),
    (["scripts/bench_progress.py", "--sizes", "4K", "--compute-ms", "2", "--reps", "2"],
     "MPI_Iallreduce"),
    (["scripts/bench_cost_model.py", "--runs", "2", "--sizes", "4K,64K"], "calibrated picks"),
    (["scripts/bench_mpi_reference.py", "--sizes", "4K", "--budget", "0.05"], "4 KiB"),
    (["scripts/bench_elastic.py", "commit", "--model", "digits", "--steps", "2", "--commits", "2"],
     "commit/step"),
]

TORCH_SCRIPTS = {"scripts/bench_torch.py", "scripts/bench_training.py"}


@pytest.mark.parametrize("args,expect", SCRIPTS, ids=[a[0].split("/")[1] for a, _ in SCRIPTS])
def test_benchmark_script_runs(mpirun, args, expect):
    if args[0] in TORCH_SCRIPTS:
        pytest.importorskip("torch")
    out = mpirun(2, args[0], *args[1:], timeout=240, pytest_module=False)
    assert expect in out, out[-2000:]


@pytest.mark.parametrize("args,expect", [
    (["--reps", "0"], "--reps must be >= 1"),
    (["--poll-ms", "5", "--compute-ms", "1"], "--poll-ms <= --compute-ms"),
    (["--compute", "stream"], "'stream' is neither matmul nor sleep"),
])
def test_bench_progress_refuses_bad_arguments(args, expect):
    """Checked before the runtime starts: the usage error, exit status 2, nothing run."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "scripts/bench_progress.py", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and expect in out.stderr, (out.returncode, out.stderr)


@pytest.mark.parametrize("args", [["--settle", "-1"], ["--reps", "0"]])
def test_bench_after_compute_refuses_bad_arguments(args):
    """Checked before the runtime starts: the usage error, exit status 2, nothing run."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "scripts/bench_after_compute.py", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--reps must be >= 1 and --settle >= 0" in out.stderr, (
        out.returncode, out.stderr)


def test_bench_mpis_drives_its_launches(tmp_path):
    """The cross-MPI driver (scripts/bench_mpis.py) launches its runs itself, each under its own
    mpiexec; with no side venvs there is one, the project's MPI, and its table and CSV name both
    MPI's call and hvlite's."""
    import csv
    import subprocess
    import sys
    out = subprocess.run(
        [sys.executable, "scripts/bench_mpis.py", "--mpis", str(tmp_path / "none"), "--rounds", "1",
         "--sizes", "4K", "--budget", "0.05", "--timeout", "200", "--csv", str(tmp_path / "m.csv")],
        capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "| mpich | MPI_Allreduce |" in out.stdout and "hvlite allreduce(x)" in out.stdout, out.stdout
    rows = list(csv.DictReader(open(tmp_path / "m.csv")))
    assert {r["column"] for r in rows} == {"mpi_out", "mpi_in", "hvlite_out", "hvlite_in"}, rows
    assert all(float(r["median_s"]) > 0 for r in rows), rows


def test_bench_training_counts_each_threads_cpu():
    """--cpu's counter: a thread that computes for 0.3 s shows about that, one that waits as
    long shows next to nothing, and the calling thread is told apart from both."""
    pytest.importorskip("torch")
    import importlib.util
    import threading
    import time
    spec = importlib.util.spec_from_file_location("bench_training", "scripts/bench_training.py")
    bt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bt)
    ids, spun, up, done = {}, threading.Event(), threading.Event(), threading.Event()

    def busy():
        ids["busy"] = threading.get_native_id()
        t = time.thread_time()
        while time.thread_time() - t < 0.3:
            pass
        spun.set()
        done.wait()

    def idle():
        ids["idle"] = threading.get_native_id()
        up.set()
        done.wait()

    threads = [threading.Thread(target=busy), threading.Thread(target=idle)]
    before = bt.thread_cpu()
    for t in threads:
        t.start()
    assert spun.wait(60) and up.wait(60)
    time.sleep(0.3)          # the idle thread's 0.3 s, however busy the machine
    after = bt.thread_cpu()
    done.set()
    for t in threads:
        t.join()
    if not after:
        pytest.skip("no /proc/self/task here")
    me = threading.get_native_id()
    assert me in after and ids["busy"] in after and ids["idle"] in after, (ids, sorted(after))
    assert 0.25 <= after[ids["busy"]] - before.get(ids["busy"], 0.0) <= 5.0, after
    assert after[ids["idle"]] - before.get(ids["idle"], 0.0) < 0.1, after
    assert after[me] - before.get(me, 0.0) < 0.2, after
