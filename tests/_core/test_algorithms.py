"""Every all-reduce algorithm against NumPy on the gathered inputs, at 1-8 ranks, on pretend
nodes, through the shared segment and with buffers over 2**31 elements, each run under mpiexec."""
import pytest

RANKS = [1, 2, 3, 4, 5, 8]


@pytest.mark.parametrize("n", RANKS)
def test_allreduce_matrix(mpirun, n):
    mpirun(n, "tests/_core/mpi_allreduce.py", timeout=300)


@pytest.mark.parametrize("n,k", [(4, 2), (5, 2), (5, 3), (8, 3), (8, 2)])
def test_hierarchical_on_pretend_nodes(mpirun, n, k):
    """HVLITE_LOCAL_SIZE=k splits the machine into nodes of k ranks (the last may be smaller).
    Within a node the shared segment does the work (64 KiB segments: the large sizes straddle
    many; the slice reduction forced), across nodes the point-to-point algorithms."""
    mpirun(n, "tests/_core/mpi_allreduce.py", "-k", "not random",
           env={"HVLITE_LOCAL_SIZE": str(k), "HVLITE_TEST_ALGORITHMS": "hierarchical,shm,auto",
                "HVLITE_SHM_SEGMENT_BYTES": "65536", "HVLITE_SHM_REDUNDANT_BYTES": "0"},
           timeout=300)


@pytest.mark.parametrize("n,k", [(5, 3), (8, 2)])
def test_hierarchical_without_shm(mpirun, n, k):
    """HVLITE_SHM=0: hierarchical over MPI point-to-point within the node too."""
    mpirun(n, "tests/_core/mpi_allreduce.py", "-k", "not random",
           env={"HVLITE_LOCAL_SIZE": str(k), "HVLITE_TEST_ALGORITHMS": "hierarchical,auto",
                "HVLITE_SHM": "0"}, timeout=300)


@pytest.mark.parametrize("n,redundant", [(2, "0"), (3, "0"), (3, "1048576"), (5, "4096")])
def test_shm_segments(mpirun, n, redundant):
    """shm with 64 KiB segments (large sizes go through in many; odd ones end mid-segment),
    with the slice reduction, the every-rank reduction, and a mix by size."""
    mpirun(n, "tests/_core/mpi_allreduce.py",
           env={"HVLITE_TEST_ALGORITHMS": "shm", "HVLITE_SHM_SEGMENT_BYTES": "65536",
                "HVLITE_SHM_REDUNDANT_BYTES": redundant}, timeout=300)


def _available_gib():
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    return int(info["MemAvailable"].split()[0]) / (1 << 20)


def test_buffers_over_two_to_the_31_elements(mpirun):
    if _available_gib() < 8:
        pytest.skip("needs 8 GiB of free memory (two ranks with a 2 GiB buffer each)")
    mpirun(2, "tests/_core/mpi_large.py", timeout=400)


@pytest.mark.parametrize("n,env", [(1, {}), (2, {}), (4, {"HVLITE_SHM_SEGMENT_BYTES": "65536"}),
                                   (3, {"HVLITE_LOCAL_SIZE": "2"}), (2, {"HVLITE_SHM": "0"}),
                                   (3, {"HVLITE_SHM_DIRECT": "0"}),
                                   # auto off: the segment always takes the direct way it can
                                   (2, {"HVLITE_CALIBRATE": "0"}),
                                   (3, {})])      # (last: the Makefile's asan list names ids)
def test_shm_segment_and_coordinator(mpirun, n, env):
    mpirun(n, "tests/_core/mpi_shm.py", env=env, timeout=240)


def test_shm_segment_does_not_outlive_a_killed_rank(mpirun, tmp_path):
    """A rank killed mid-job leaves nothing in /dev/shm: the names are unlinked at init."""
    import os
    script = tmp_path / "killed.py"
    script.write_text(
        "import os, signal, numpy as np, hvlite as hvd\n"
        "hvd.init()\n"
        "os.write(1, f'pid={os.getpid()}\\n'.encode())\n"
        "hvd.allreduce(np.ones(1000, np.float32), algorithm='shm')\n"
        "if hvd.rank() == 1:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "import time; time.sleep(30)\n")
    with pytest.raises(pytest.fail.Exception) as info:
        mpirun(2, str(script), timeout=60, pytest_module=False)
    import re
    pids = set(re.findall(r"pid=(\d+)", str(info.value)))
    assert len(pids) == 2, str(info.value)
    left = [e for e in os.listdir("/dev/shm") if e.startswith("hvlite-") and e.split("-")[1] in pids]
    assert not left, f"left in /dev/shm after a killed rank: {left}"


def test_shm_segment_names():
    """Unique per call and per host (host names sharing /dev/shm), still led by the pid that
    the launcher's clean-up and the tests look for, and a valid single-component name."""
    import os
    from hvlite._core.shm import segment as shm
    a, b = shm.segment_name(123).decode(), shm.segment_name(123).decode()
    assert a != b and a.startswith("/hvlite-123-") and b.startswith("/hvlite-123-")
    host = "".join(c if c.isalnum() or c in "._" else "_" for c in os.uname().nodename)[:64]
    assert f"-{host}-" in a and "/" not in a[1:] and len(a) < 255
    assert a.split("-")[-1] != b.split("-")[-1]          # the random part


def test_shm_failed_create_unlinks_nothing(mpirun):
    """A leader whose exclusive create fails (the name is another host's live segment) gets no
    shm path and leaves that segment alone."""
    out = mpirun(2, "tests/_core/mpi_shm_names.py", pytest_module=False, timeout=60)
    assert out.count(": ok") == 2, out


@pytest.mark.parametrize("n", [2, 3, 5])
def test_minmax_nan_and_signed_zeros(mpirun, n):
    """Min/Max of floats with NaN, infinities and signed zeros spread over the ranks: the
    documented rule's bits, identical on every rank, on every algorithm and MPI's own."""
    mpirun(n, "tests/_core/mpi_minmax.py", timeout=240)
