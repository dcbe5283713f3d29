"""Average = Sum / size, bit for bit, on every shared-segment path its division is fused into."""
import pytest

PATHS = {
    "direct": {},                                            # peers' buffers read directly
    "slots": {"HVLITE_SHM_DIRECT": "0"},                     # through the segment's slots
    "redundant": {"HVLITE_SHM_DIRECT": "0", "HVLITE_SHM_REDUNDANT_BYTES": str(1 << 30)},
    "small-segment": {"HVLITE_SHM_DIRECT": "0", "HVLITE_SHM_SEGMENT_BYTES": "8192"},
}


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("path", list(PATHS))
def test_average_is_sum_divided_bit_for_bit(mpirun, n, path):
    if n == 5 and path != "direct":
        pytest.skip("5 ranks: the default path only (CI time)")
    out = mpirun(n, "tests/_core/mpi_average.py", timeout=240, pytest_module=False,
                 env=dict(PATHS[path], HVLITE_PROBE="0"))
    assert out.count("average ok") == n
