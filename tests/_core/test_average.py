"""Average = Sum / size, bit for bit, on every path its division is fused into: the shared
segment's, the nodes' sum after it, and the last pass of ring, rhd, rd and tree."""
import pytest

PATHS = {
    # peers' buffers read directly: with auto's calibration off the segment takes that way
    # wherever it can, instead of measuring both ways first
    "direct": {"HVLITE_CALIBRATE": "0"},
    "slots": {"HVLITE_SHM_DIRECT": "0"},                     # through the segment's slots
    "redundant": {"HVLITE_SHM_DIRECT": "0", "HVLITE_SHM_REDUNDANT_BYTES": str(1 << 30)},
    "small-segment": {"HVLITE_SHM_DIRECT": "0", "HVLITE_SHM_SEGMENT_BYTES": "8192"},
}
FLAT = "ring,rhd,rd,tree"


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("path", list(PATHS))
def test_average_is_sum_divided_bit_for_bit(mpirun, n, path):
    if n == 5 and path != "direct":
        pytest.skip("5 ranks: the default path only (CI time)")
    out = mpirun(n, "tests/_core/mpi_average.py", timeout=240, pytest_module=False,
                 env=dict(PATHS[path], HVLITE_PROBE="0"))
    assert out.count("average ok") == n


@pytest.mark.parametrize("n", [3, 4])
def test_average_in_the_flat_algorithms(mpirun, n):
    """Each element divided once, by the rank that finished it, before it is copied on (3
    ranks: a true division and rhd's and rd's folds; 4: a power of two, multiplied)."""
    out = mpirun(n, "tests/_core/mpi_average.py", timeout=300, pytest_module=False,
                 env={"HVLITE_PROBE": "0", "AVERAGE_ALGORITHMS": FLAT})
    assert out.count("average ok") == n


@pytest.mark.parametrize("n,local", [(4, 2), (3, 2)], ids=["2x2", "uneven"])
def test_average_across_emulated_nodes(mpirun, n, local):
    """Across nodes the cross algorithm divides the nodes' sum of each rank's slice (equal
    nodes) or the leader's whole buffer (uneven nodes: a rank alone on its node too)."""
    out = mpirun(n, "tests/_core/mpi_average.py", timeout=300, pytest_module=False,
                 env={"HVLITE_PROBE": "0", "HVLITE_LOCAL_SIZE": str(local),
                      "AVERAGE_ALGORITHMS": "shm,hierarchical," + FLAT})
    assert out.count("average ok") == n
