"""Bytes on the wire, per method and per tensor: what each compressed reduction sent.

payload_bytes: the compressed message this rank handed to the collective (what the papers'
compression ratios count); wire_bytes: what this rank then sends under a bandwidth-optimal
algorithm (ring all-reduce 2(n-1)/n of the payload, all-gather (n-1) times it); the dense_*
figures are the same for the uncompressed tensor under an all-reduce.
"""
import json
import threading

_lock = threading.Lock()
_tensors = {}          # (method, name) -> totals
_FIELDS = ("calls", "dense_bytes", "payload_bytes", "wire_bytes", "dense_wire_bytes")


def record(method, name, dense, payload, wire, dense_wire):
    with _lock:
        t = _tensors.setdefault((method, name), dict.fromkeys(_FIELDS, 0))
        t["calls"] += 1
        t["dense_bytes"] += int(dense)
        t["payload_bytes"] += int(payload)
        t["wire_bytes"] += int(wire)
        t["dense_wire_bytes"] += int(dense_wire)
        t["last"] = {"dense_bytes": int(dense), "payload_bytes": int(payload),
                     "wire_bytes": int(wire)}


def _ratios(t):
    t["ratio"] = t["dense_bytes"] / t["payload_bytes"] if t["payload_bytes"] else None
    t["wire_ratio"] = t["dense_wire_bytes"] / t["wire_bytes"] if t["wire_bytes"] else None
    return t


def stats(reset=False):
    """Totals since the start (or the last reset): {"methods": {method: totals},
    "tensors": {method: {name: totals and "last", the latest call's bytes}}}; totals hold
    calls, dense_bytes, payload_bytes, wire_bytes, dense_wire_bytes, ratio (dense/payload) and
    wire_ratio (None where nothing was sent: one rank sends nothing)."""
    with _lock:
        methods, tensors = {}, {}
        for (method, name), t in _tensors.items():
            m = methods.setdefault(method, dict.fromkeys(_FIELDS, 0))
            for f in _FIELDS:
                m[f] += t[f]
            tensors.setdefault(method, {})[name] = _ratios({**t, "last": dict(t["last"])})
        if reset:
            _tensors.clear()
    return {"methods": {k: _ratios(v) for k, v in methods.items()}, "tensors": tensors}


def reset_stats():
    stats(reset=True)


def span(rt, method, name, t0_perf):
    """Mark the compression of `name` on its timeline row, its byte counts as the args."""
    tl = rt.timeline
    if tl is None or not tl.active:
        return
    import time
    from hvlite._core.trace import now
    end = now()
    start = end - (time.perf_counter() - t0_perf)
    with _lock:
        t = _tensors.get((method, name))
        last = dict(t["last"]) if t else {}
    args = json.dumps({"tensor": name, "method": method, **last})
    tl.writer.span(f"COMPRESS_{method.upper()}", start, end, row=name, args=args)
