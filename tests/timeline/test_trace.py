"""The timeline under mpiexec, and a trace left by a killed process."""
import os
import subprocess
import sys

import pytest

from hvlite.timeline import report

HERE = os.path.dirname(os.path.abspath(__file__))


def test_trace_of_a_job(mpirun, tmp_path):
    mpirun(3, "tests/timeline/mpi_timeline.py", env={"TRACE_PATH": str(tmp_path / "trace.json")})
    assert (tmp_path / "trace.rank2.json").exists()


def test_killed_writer_leaves_a_loadable_file(tmp_path):
    path = tmp_path / "killed.json"
    proc = subprocess.run([sys.executable, os.path.join(HERE, "killed_writer.py"), str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    assert not path.read_text().rstrip().endswith("]")
    with pytest.warns(report.TruncatedTraceWarning, match=str(path)):
        events = report.load(path)
    assert {e["args"]["tensor"] for e in events if "tensor" in e.get("args", {})} == {f"t{i}" for i in range(5)}
    assert sum(1 for e in events if e.get("tid") == 0 and e["ph"] == "X") == 5


def test_an_unwritable_timeline_path_fails_init_on_every_rank(tmp_path):
    from conftest import run_mpi
    path = tmp_path / "missing" / "trace.json"
    out = run_mpi(3, "tests/timeline/bad_path.py", pytest_module=False, timeout=60,
                  env={"HVLITE_TIMELINE": str(path)})
    want = f"rank 0 cannot write the trace to {str(path)!r}"
    # (the ranks' lines may interleave)
    assert all(f"[{r}] ConfigError: HVLITE_TIMELINE=" in out for r in range(3)), out
    assert out.count(want) == 3 and out.count("initialized: False") == 3, out
