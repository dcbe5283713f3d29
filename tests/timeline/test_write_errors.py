"""A trace file that stops taking writes (a full disk, a size limit) is reported, not ignored:
a warning when it happens, OSError from stop_timeline() naming the file, the trace whole up to
its last complete event, and the job's collectives unaffected."""
import json
import warnings

from conftest import run_mpi

from hvlite.timeline import report


def test_a_failed_trace_write_is_reported_and_the_trace_still_loads(tmp_path):
    path = tmp_path / "cut.json"
    out = run_mpi(2, "tests/timeline/mpi_trace_write_error.py", str(path), pytest_module=False,
                  timeout=120)
    # rank 0 writes the trace; the writer thread warns too if its own flush met the limit
    assert "[0] stop_timeline raised" in out and "File too large" in out, out
    assert "[0] no error" not in out and "[1] no error from stop_timeline" in out, out
    assert out.count("collectives after it are right") == 2, out
    size = path.stat().st_size
    assert 0 < size <= 64 << 10
    try:
        json.loads(path.read_text())
        raise AssertionError("the cut trace parsed whole: the write never failed")
    except json.JSONDecodeError:
        pass
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        events = report.load(str(path))
    assert len(events) > 10
