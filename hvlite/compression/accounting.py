"""Bytes on the wire, per method and per tensor: what each compressed reduction sent.

payload_bytes: the compressed message this rank handed to the collective (what the papers'
compression ratios count); wire_bytes: what this rank then sends under a bandwidth-optimal
algorithm (ring all-reduce 2(n-1)/n of the payload, all-gather (n-1) times it); the dense_*
figures are the same for the uncompressed tensor under an all-reduce.
"""
import json
import threading

_lock = threading.Lock()
_tensors = {}          # (method, name) -> [the totals of _FIELDS..., then the last call's _LAST]
_FIELDS = ("calls", "dense_bytes", "payload_bytes", "wire_bytes", "dense_wire_bytes")
_LAST = ("dense_bytes", "payload_bytes", "wire_bytes")


def record(method, name, dense, payload, wire, dense_wire):
    """Count one call (every compressed gradient of every step: a list updated in place, ~4x
    cheaper than the dicts it was)."""
    dense, payload, wire = int(dense), int(payload), int(wire)
    with _lock:
        t = _tensors.get((method, name))
        if t is None:
            t = _tensors[(method, name)] = [0, 0, 0, 0, 0, 0, 0, 0]
        t[0] += 1
        t[1] += dense
        t[2] += payload
        t[3] += wire
        t[4] += int(dense_wire)
        t[5], t[6], t[7] = dense, payload, wire


def _as_dict(t):
    return {**dict(zip(_FIELDS, t)), "last": dict(zip(_LAST, t[5:]))}


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
            for i, f in enumerate(_FIELDS):
                m[f] += t[i]
            tensors.setdefault(method, {})[name] = _ratios(_as_dict(t))
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
        last = dict(zip(_LAST, t[5:])) if t else {}
    args = json.dumps({"tensor": name, "method": method, **last})
    tl.writer.span(f"COMPRESS_{method.upper()}", start, end, row=name, args=args)
