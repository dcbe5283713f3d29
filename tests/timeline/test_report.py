"""The timeline report on hand-made traces whose answers are known."""
import json
import os

import pytest

from hvlite.timeline import report
from hvlite.timeline.cli import main


def x(name, ts, dur, pid=0, tid=2, **args):
    e = {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid}
    if args:
        e["args"] = args
    return e


def hand_made():
    """Rank 0: compute [0,100) and [200,300); communication [50,150) and [250,260):
    110 µs of communication, 60 of them under compute. Rank 1: no compute, 40 µs of
    communication. Overall: 60 of 150."""
    meta = [{"name": "thread_name", "ph": "M", "pid": p, "tid": 2, "args": {"name": "grad.w"}}
            for p in (0, 1)]
    return meta + [
        x("step", 0, 100, tid=0), x("step", 200, 100, tid=0),
        x("ALLREDUCE", 10, 150, tensor="grad.w", bytes=64), x("NEGOTIATE_ALLREDUCE", 10, 30),
        x("QUEUE", 40, 10), x("RING_ALLREDUCE", 50, 100),
        x("ALLREDUCE", 240, 30, tensor="grad.w", bytes=64), x("NEGOTIATE_ALLREDUCE", 240, 5),
        x("QUEUE", 245, 5), x("MEMCPY_IN_FUSION_BUFFER", 250, 2), x("RHD_ALLREDUCE", 252, 6),
        x("MEMCPY_OUT_FUSION_BUFFER", 258, 2),
        x("ALLREDUCE", 0, 50, pid=1, tensor="grad.w", bytes=64), x("MPI_ALLREDUCE", 10, 40, pid=1),
    ]


def test_overlap_on_a_known_trace():
    ov = report.overlap(hand_made())
    assert ov[0] == pytest.approx((110.0, 60.0))
    assert ov[1] == pytest.approx((40.0, 0.0))
    assert ov["all"] == pytest.approx((150.0, 60.0))


def test_tensor_table():
    rows = report.tensors(hand_made())
    r = rows["grad.w"]
    assert r["count"] == 3 and r["bytes"] == 64 and r["op"] == "ALLREDUCE"
    # negotiate 30 + 5 (rank 0) over 3 outer events; communicate 100 + 10 + 40
    assert r["negotiate"] == pytest.approx(35 / 3) and r["communicate"] == pytest.approx(150 / 3)


def test_unterminated_trace_loads(tmp_path):
    p = tmp_path / "t.json"
    body = ",\n".join(json.dumps(e) for e in hand_made())
    p.write_text("[\n" + body + ",\n")                 # as a killed writer leaves it
    assert report.load(p) == hand_made()
    p.write_text("[\n" + body + "\n]\n")
    assert report.load(p) == hand_made()


def test_cli_summary_and_plot(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(hand_made()))
    assert main(["summary", str(p)]) == 0
    out = capsys.readouterr().out
    assert "grad.w" in out and "54.5%" in out.replace("  ", " ") or "54.5%" in out
    pytest.importorskip("matplotlib")
    png = tmp_path / "t.png"
    assert main(["plot", str(p), "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 5000


def test_cli_reports_unreadable_file(tmp_path, capsys):
    assert main(["summary", str(tmp_path / "missing.json")]) == 2
    assert "cannot read trace" in capsys.readouterr().err
