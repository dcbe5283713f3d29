"""Reading traces back: tolerant loading, per-tensor summaries, and the overlap figure."""
import json
import warnings
from collections import defaultdict

COMPUTE_TID = 0
PHASES_AFTER_QUEUE = ("MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER")


class TruncatedTraceWarning(UserWarning):
    """A trace that ends before its closing ']' (a job that died): its complete events are
    read, the rest is dropped."""


def load(path):
    """Events of a trace file: a JSON array of events, or Chrome's {"traceEvents": [...]}. A
    trace cut short (a job that died, even in the middle of an event) loads up to its last
    complete event, with a TruncatedTraceWarning saying where it ends; anything that is not a
    trace at all, or an event without the fields the summaries read, raises ValueError naming
    the file (and the event)."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        pass
    else:
        if isinstance(data, dict) and "traceEvents" in data:
            data = data["traceEvents"]
        if not isinstance(data, list):
            raise ValueError(f"{path}: not a trace hvlite can read (a JSON array of events, or "
                             f"an object with traceEvents), but a JSON {type(data).__name__}")
        return _checked(data, path)
    events, end, why = _complete_events(text)
    if why is None:
        raise ValueError(f"{path}: not a trace hvlite can read (a JSON array of events)")
    warnings.warn(f"{path}: {why} (at character {end} of {len(text)}): read its {len(events)} "
                  "complete event(s) and dropped the rest; the job that wrote it may have died",
                  TruncatedTraceWarning, stacklevel=2)
    return _checked(events, path)


def _row(e):
    """(pid, tid) of an event: Chrome lets either be left out (0)."""
    return e.get("pid", 0), e.get("tid", 0)


def pid_order(pid):
    """Sort key for pids: numbers in order, then strings (Chrome allows either)."""
    return (isinstance(pid, str), pid if isinstance(pid, str) else float(pid), str(pid))


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _checked(events, path):
    """`events`, each checked for what the summaries and the plot read: a dict; its pid and tid
    (where given) numbers or strings; a complete span ("X") with a numeric ts and dur and a
    string name; args, where given, an object (a thread's name a string)."""
    for i, e in enumerate(events):
        why = None
        if not isinstance(e, dict):
            why = f"a JSON {type(e).__name__}, not an event object"
        elif not all(isinstance(e.get(k, 0), (int, float, str)) and not isinstance(
                e.get(k, 0), bool) for k in ("pid", "tid")):
            why = "its pid or tid is neither a number nor a string"
        elif not isinstance(e.get("args", {}), dict):
            why = "its args are not an object"
        elif e.get("ph") == "X" and not (_number(e.get("ts")) and _number(e.get("dur", 0))
                                         and isinstance(e.get("name", ""), str)):
            why = "a span without a numeric ts and dur, or with a name that is not a string"
        elif e.get("ph") == "M" and e.get("name") == "thread_name" and not isinstance(
                e.get("args", {}).get("name"), str):
            why = "a thread_name record without a name"
        if why:
            raise ValueError(f"{path}: event {i} is not one hvlite can read: {why}")
    return events


def _complete_events(text):
    """(events, offset, why) of a trace array that does not parse whole: the events up to the
    first one that does not parse, where that is, and why it stops (None: not a trace)."""
    decoder = json.JSONDecoder()
    i = len(text) - len(text.lstrip())
    if not text.startswith("[", i):
        return [], i, None
    i += 1
    events = []
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text):
            return events, i, "the trace ends without its closing ']'"
        if text[i] == "]":                       # closed, but something after it is wrong
            return events, i, "the trace has text after its closing ']'"
        try:
            event, after = decoder.raw_decode(text, i)
        except ValueError:
            return events, i, "the trace stops at an event cut short or damaged"
        if not isinstance(event, dict):
            return events, i, "the trace stops at an entry that is not an event"
        events.append(event)
        i = after


def load_many(paths):
    events = []
    for p in paths:
        events.extend(load(p))
    return events


def is_communication(e):
    """The phases in which a collective moves or packs data (after it left the queue)."""
    name = e.get("name", "")
    return e.get("ph") == "X" and e.get("tid", 0) >= 2 and not name.startswith("NEGOTIATE_") and (
        name.endswith("_ALLREDUCE") or name.startswith("MPI_") or name in PHASES_AFTER_QUEUE)


def is_operation(e):
    """A collective's own record on its tensor's row (args name the tensor): not a negotiation
    phase, and not a compression span (COMPRESS_<METHOD>: the compressor's work on the same
    row, before and after the all-reduce it belongs to)."""
    name = e.get("name", "")
    return "tensor" in e.get("args", {}) and not name.startswith(("NEGOTIATE_", "COMPRESS_"))


def _union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _length(intervals):
    return sum(b - a for a, b in intervals)


def _intersection(xs, ys):
    total, i, j = 0.0, 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if b > a:
            total += b - a
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


def overlap(events):
    """{rank: (communication µs, of which under a compute span µs)} plus "all" summed."""
    comm, compute = defaultdict(list), defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        iv = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        if e.get("tid") == COMPUTE_TID:
            compute[e.get("pid", 0)].append(iv)
        elif is_communication(e):
            comm[e.get("pid", 0)].append(iv)
    out = {}
    for pid in sorted(comm, key=pid_order):
        c, k = _union(comm[pid]), _union(compute.get(pid, []))
        out[pid] = (_length(c), _intersection(c, k))
    out["all"] = (sum(v[0] for v in out.values()), sum(v[1] for v in out.values()))
    return out


def tensors(events):
    """Per tensor name: count, bytes, and mean negotiate / queue / communicate µs."""
    rows = defaultdict(lambda: {"op": "", "count": 0, "bytes": 0, "negotiate": 0.0,
                                "queue": 0.0, "communicate": 0.0})
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[_row(e)] = e["args"]["name"]
    for e in events:
        if e.get("ph") != "X" or e.get("tid", 0) < 2:
            continue
        tensor = names.get(_row(e), str(_row(e)[1]))
        r = rows[tensor]
        name = e.get("name", "")
        if is_operation(e):
            r["op"], r["count"] = name, r["count"] + 1
            r["bytes"] = e["args"].get("bytes", 0)
        elif name.startswith("NEGOTIATE_"):
            r["negotiate"] += e.get("dur", 0)
        elif name == "QUEUE":
            r["queue"] += e.get("dur", 0)
        elif is_communication(e):
            r["communicate"] += e.get("dur", 0)
    for r in rows.values():
        for k in ("negotiate", "queue", "communicate"):
            r[k] /= max(r["count"], 1)
    return dict(rows)


def per_op(events):
    """{op: (count, µs during which some tensor of that op was communicating, per rank summed)}.
    Fused tensors share one interval, so unions (not sums) give the time."""
    kinds = {}
    for e in events:
        if e.get("ph") == "X" and is_operation(e):
            kinds.setdefault(_row(e), e.get("name", ""))
    count = defaultdict(int)
    intervals = defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        op = kinds.get(_row(e))
        if op is None:
            continue
        if is_operation(e):
            count[op] += 1
        elif is_communication(e):
            intervals[(op, e.get("pid", 0))].append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    busy = defaultdict(float)
    for (op, _), iv in intervals.items():
        busy[op] += _length(_union(iv))
    return {op: (count[op], busy[op]) for op in count}


def summary_text(events, top=25):
    rows = tensors(events)
    lines = [f"{'tensor':<28} {'op':<14} {'count':>6} {'bytes':>10} {'negotiate us':>13} "
             f"{'queue us':>9} {'comm us':>9}"]
    by_time = sorted(rows.items(), key=lambda kv: -kv[1]["communicate"] * kv[1]["count"])
    for name, r in by_time[:top]:
        lines.append(f"{name[:28]:<28} {r['op']:<14} {r['count']:>6} {r['bytes']:>10} "
                     f"{r['negotiate']:>13.1f} {r['queue']:>9.1f} {r['communicate']:>9.1f}")
    if len(rows) > top:
        lines.append(f"... {len(rows) - top} more tensors")
    lines.append("")
    lines.append(f"{'op':<14} {'count':>7} {'comm ms':>10}   (time any tensor of the op was communicating)")
    for op, (count, busy) in sorted(per_op(events).items()):
        lines.append(f"{op:<14} {count:>7} {busy / 1000:>10.2f}")
    lines.append("")
    ov = overlap(events)
    for pid, (comm, hidden) in ov.items():
        share = hidden / comm if comm else 0.0
        who = "overall" if pid == "all" else f"rank {pid}"
        lines.append(f"overlap {who:>8}: {share:6.1%} of {comm / 1000:.2f} ms of communication "
                     f"ran while a compute span was open")
    return "\n".join(lines)
