"""The timeline report on hand-made traces whose answers are known."""
import json
import os
import warnings

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
    with pytest.warns(report.TruncatedTraceWarning, match="without its closing"):
        assert report.load(p) == hand_made()
    p.write_text("[\n" + body + "\n]\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # a whole trace loads without a word
        assert report.load(p) == hand_made()


def test_a_trace_cut_anywhere_loads_up_to_its_last_complete_event(tmp_path):
    """Cut at every offset (a writer killed in the middle of an event): the events whose text
    is whole load, with a warning naming the file; nothing raises."""
    events = hand_made()
    text = "[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]\n"
    ends, at = [], 2
    for e in events:
        at += len(json.dumps(e))
        ends.append(at)
        at += 2
    p = tmp_path / "cut.json"
    for cut in range(1, len(text) - 2):               # up to the closing ']'
        p.write_text(text[:cut])
        want = sum(1 for end in ends if end <= cut)
        with pytest.warns(report.TruncatedTraceWarning, match=f"{p}: the trace") as caught:
            got = report.load(p)
        assert got == events[:want], cut
        assert f"read its {want} complete event(s)" in str(caught[0].message)
    p.write_text(text[:-1])                           # only the last newline gone: whole
    assert report.load(p) == events


def test_a_damaged_event_stops_the_load_there(tmp_path):
    events = hand_made()
    lines = [json.dumps(e) for e in events]
    lines[3] = lines[3][:20] + "#" + lines[3][21:]
    p = tmp_path / "damaged.json"
    p.write_text("[\n" + ",\n".join(lines) + "\n]\n")
    with pytest.warns(report.TruncatedTraceWarning, match="cut short or damaged"):
        assert report.load(p) == events[:3]
    p.write_text("not a trace")
    with pytest.raises(ValueError, match=f"{p}: not a trace hvlite can read"):
        report.load(p)


def test_cli_reads_a_cut_trace_and_says_so(tmp_path, capsys):
    text = "[\n" + ",\n".join(json.dumps(e) for e in hand_made())
    p = tmp_path / "t.json"
    p.write_text(text[:len(text) - 30])               # inside the last event
    assert main(["summary", str(p)]) == 0
    captured = capsys.readouterr()
    assert "grad.w" in captured.out
    assert f"hvlite-timeline: warning: {p}: the trace stops at an event cut short" in captured.err
    assert f"read its {len(hand_made()) - 1} complete event(s)" in captured.err


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


def test_chromes_object_form_reads_as_the_array(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": hand_made(), "displayTimeUnit": "ms"}))
    assert report.overlap(report.load(str(p))) == report.overlap(hand_made())
    assert main(["summary", str(p)]) == 0
    assert "grad.w" in capsys.readouterr().out


@pytest.mark.parametrize("trace, why", [
    ({"events": []}, "but a JSON dict"),
    ([1, 2], "event 0 is not one hvlite can read: a JSON int"),
    ([{"ph": "X", "tid": 0}], "event 0 .* a span without a numeric ts"),
    ([x("a", 0, 1), {"ph": "X", "ts": "0", "dur": 1}], "event 1 .* a span without a numeric ts"),
    ([{"name": "thread_name", "ph": "M", "pid": 0, "tid": 2}], "a thread_name record without"),
    ([x("a", 0, 1, pid=[0])], "its pid or tid is neither"),
    ([dict(x("a", 0, 1), args=[1])], "its args are not an object"),
])
def test_json_that_is_not_a_trace_is_refused_naming_the_file(tmp_path, capsys, trace, why):
    """JSON that parses but is not a trace is a clear refusal (exit 2), never a traceback from
    deep in the summaries."""
    p = tmp_path / "t.json"
    p.write_text(json.dumps(trace))
    with pytest.raises(ValueError, match=f"{p}: .*{why}"):
        report.load(str(p))
    assert main(["summary", str(p)]) == 2
    assert f"cannot read trace: {p}" in capsys.readouterr().err


def test_string_pids_and_missing_ones_summarise(tmp_path):
    """Chrome allows string pids, and pid and tid may be left out: the summaries still read."""
    events = [x("step", 0, 100, tid=0, pid="host-a"), x("MPI_ALLREDUCE", 50, 100, pid="host-a"),
              {"name": "MPI_ALLREDUCE", "ph": "X", "ts": 0, "dur": 10, "tid": 3}]
    ov = report.overlap(events)
    assert ov["host-a"] == pytest.approx((100.0, 50.0)) and ov[0] == pytest.approx((10.0, 0.0))
    assert "overall" in report.summary_text(events)


def test_compressed_allreduces_count_as_allreduces():
    """A compressed all-reduce's row holds its COMPRESS_<METHOD> span before the collective:
    the tables count the all-reduce once, as an all-reduce, and the span is not communication."""
    meta = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": 2, "args": {"name": "g"}}]
    events = meta + [
        x("COMPRESS_FP16", 0, 20, tensor="g", method="fp16"),
        x("ALLREDUCE", 20, 50, tensor="g", bytes=32), x("RING_ALLREDUCE", 30, 40),
        x("COMPRESS_FP16", 100, 20, tensor="g", method="fp16"),
        x("ALLREDUCE", 120, 50, tensor="g", bytes=32), x("RING_ALLREDUCE", 130, 40),
    ]
    r = report.tensors(events)["g"]
    assert r["op"] == "ALLREDUCE" and r["count"] == 2 and r["communicate"] == pytest.approx(40)
    assert report.per_op(events) == {"ALLREDUCE": (2, pytest.approx(80.0))}
    assert report.overlap(events)[0] == pytest.approx((80.0, 0.0))
