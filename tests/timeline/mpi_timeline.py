"""Rank side: a short job's trace. Every tensor shows its phases, nested and in order; compute
spans land on the compute row; overlap is measured; files are valid JSON after stop."""
import json
import os

import numpy as np

import hvlite as hvd
from helpers import assert_everywhere
from hvlite.timeline import per_rank_path, report

hvd.init()
N, RANK = hvd.size(), hvd.rank()
PATH = os.environ["TRACE_PATH"]


def test_trace_of_a_short_job():
    hvd.start_timeline(PATH, mark_cycles=True, all_ranks=True)
    names = []
    for step in range(3):
        hs = []
        with hvd.timeline.span(f"forward/{step}"):
            x = np.ones(1000, np.float32)
        for i in range(6):                                   # small: fused together
            with hvd.timeline.span(f"backward/layer{i}"):
                g = np.full(256 * (i + 1), float(RANK), np.float32)
            hs.append(hvd.allreduce_async(g, name=f"grad.{i}"))
        hs.append(hvd.allreduce_async(np.ones(1 << 17, np.float32), name="grad.big"))
        with hvd.timeline.span("optimizer"):
            for h in hs:
                h.synchronize()
        hvd.allgather(np.ones((RANK + 1, 2)), name=f"gather.{step}")
        hvd.broadcast(x, 0, name=f"bcast.{step}")
    long_name = 'a "quoted" span\\ ' + "x" * 300          # longer than any formatting buffer
    with hvd.timeline.span(long_name):
        pass
    names = [f"grad.{i}" for i in range(6)] + ["grad.big"]
    hvd.stop_timeline()
    path = PATH if RANK == 0 else per_rank_path(PATH, RANK)
    with open(path) as f:
        events = json.load(f)                                # valid JSON after stop
    failures = []
    if not any(e.get("name") == long_name and e.get("ph") == "X" for e in events):
        failures.append("the long span name did not come back intact")
    threads = {e["tid"]: e["args"]["name"] for e in events
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    rows = {v: k for k, v in threads.items()}
    for name in names + ["gather.0", "bcast.0"]:
        if name not in rows:
            failures.append(f"no row for {name}")
            continue
        evs = sorted((e for e in events if e.get("tid") == rows[name] and e["ph"] == "X"),
                     key=lambda e: (e["ts"], -e["dur"]))
        outers = [e for e in evs if "tensor" in e.get("args", {})]
        if len(outers) != (3 if name.startswith("grad") else 1):
            failures.append(f"{name}: {len(outers)} outer events")
        for outer in outers:
            inner = [e for e in evs if e is not outer and outer["ts"] <= e["ts"] and
                     e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + 0.01]
            phase_names = [e["name"] for e in inner]
            if any(e["dur"] < 0 for e in inner) or not phase_names:
                failures.append(f"{name}: bad phases {phase_names}")
                continue
            want = ["NEGOTIATE_", "QUEUE"]
            if not (phase_names[0].startswith(want[0]) and phase_names[1] == want[1]):
                failures.append(f"{name}: phases out of order {phase_names}")
            ends = [e["ts"] + e["dur"] for e in inner]
            if ends != sorted(ends):
                failures.append(f"{name}: phases overlap {phase_names}")
            if name.startswith("grad.") and name != "grad.big" and outer["args"]["fused"] > 1:
                if outer["args"]["algorithm"] == "SHM":     # gathered into the segment: one phase
                    if phase_names[2:] != ["SHM_ALLREDUCE"]:
                        failures.append(f"{name}: fused phases through the segment {phase_names}")
                elif phase_names[2:] != ["MEMCPY_IN_FUSION_BUFFER", phase_names[3],
                                         "MEMCPY_OUT_FUSION_BUFFER"] or not phase_names[3].endswith("_ALLREDUCE"):
                    failures.append(f"{name}: fused phases {phase_names}")
            # Large tensors run alone, except when packed straight into the shared segment.
            alone = outer["args"]["fused"] == 1 or outer["args"]["algorithm"] == "SHM"
            if name == "grad.big" and (not alone or outer["args"]["bytes"] != 4 << 17):
                failures.append(f"grad.big args {outer['args']}")
            if name.startswith("gather") and phase_names[-1] != "MPI_ALLGATHER":
                failures.append(f"{name}: {phase_names}")
    spans = [e["name"] for e in events if e.get("tid") == 0 and e["ph"] == "X"]
    if spans.count("optimizer") != 3 or "backward/layer5" not in spans:
        failures.append(f"compute spans {spans}")
    if not any(e["name"] == "CYCLE" for e in events):
        failures.append("no cycle markers")
    comm, hidden = report.overlap(events)[RANK]
    if not (comm > 0 and 0 <= hidden <= comm):
        failures.append(f"overlap {comm} {hidden}")
    assert_everywhere(failures)


def test_env_variable_starts_it_and_span_is_free_when_off():
    with hvd.timeline.span("nothing"):
        pass
    hvd.shutdown()
    os.environ["HVLITE_TIMELINE"] = PATH + ".env.json"
    hvd.init()
    hvd.allreduce(np.ones(3), name="env")
    hvd.shutdown()
    del os.environ["HVLITE_TIMELINE"]
    if RANK == 0:
        assert any(e.get("args", {}).get("tensor") == "env" for e in report.load(PATH + ".env.json"))
    hvd.init()
