"""hvliterun's failure summary: the per-rank records the supervisor (hvlite.run.rank) wrote, read
after mpiexec returned, and the lines that say which rank failed, where, how, and first.

A rank's record is "exited" (the wrapper saw the rank end: exit code or signal) or still
"running" (the wrapper was killed along with the rank: hydra kills the survivors of a failed
job with SIGKILL before they can write more). The root cause is the failed rank whose trouble
came first: its first error line's time, else its end time.
"""
import json
import os
import re

WIDTH = 72


def read_records(directory):
    """[record, ...] from the status directory's *.json files (unreadable ones are skipped)."""
    records = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return records
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name)) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records


def failed(rec):
    return rec.get("state") == "exited" and (bool(rec.get("signal")) or rec.get("exit_code") != 0)


def _when(rec):
    """When this rank's trouble began: its first error line, else its end."""
    times = [t for t in (rec.get("error_time"), rec.get("end_time")) if t is not None]
    return min(times) if times else None


# hvlite's errors that are a consequence of another rank's trouble, naming that rank
_BLAMES = re.compile(r"shutdown\(\) on rank (\d+)|\brank (\d+) (?:is lost|failed)")


def root_cause(records):
    """The failed rank whose trouble came first (a rank killed after printing an error counts
    too, by that error's time), or None. A rank whose error names another failed rank as its
    cause (ShutdownError "shutdown() on rank 1", "rank 1 is lost", "rank 1 failed") hands the
    blame on to it: the times are when each rank's supervisor read the line, and on a busy
    machine the culprit's traceback may be read after the error it caused."""
    candidates = [r for r in records if failed(r) or
                  (r.get("state") == "running" and r.get("error_time") is not None)]
    candidates = [r for r in candidates if _when(r) is not None]
    if not candidates:
        return None
    first = root = min(candidates, key=_when)
    by_rank = {r.get("rank"): r for r in candidates if r.get("rank") is not None}
    seen = {root.get("rank")}
    while True:
        m = _BLAMES.search(root.get("first_error") or "")
        blamed = int(m.group(1) or m.group(2)) if m else None
        if blamed is None or blamed not in by_rank:
            return root
        if blamed in seen:          # the ranks blame each other round a circle: time decides
            return first
        seen.add(blamed)
        root = by_rank[blamed]


def job_failed(records, returncode):
    return returncode != 0 or any(failed(r) for r in records)


def _rank(rec):
    return "rank ?" if rec.get("rank") is None else f"rank {rec['rank']}"


def _status(rec, root):
    if rec.get("state") == "exited":
        how = f"killed by {rec['signal']}" if rec.get("signal") else f"exit code {rec.get('exit_code')}"
        extra = [f"pid {rec['pid']}"] if rec.get("pid") else []
        if rec.get("wall_time") is not None:
            extra.append(f"after {rec['wall_time']:.1f} s")
        return how + (f" ({', '.join(extra)})" if extra else "")
    if root is not None and root is not rec:
        return f"killed by mpiexec after {_rank(root)} failed"
    return "killed by mpiexec (no exit record)"


def format_summary(records, returncode, command=(), size=None, signal_name=None):
    """The failure summary (a str), or None when the job did not fail."""
    if not job_failed(records, returncode):
        return None
    root = root_cause(records)
    shown = [r for r in records if failed(r) or r.get("state") == "running"]
    shown.sort(key=lambda r: (r is not root, r.get("rank") is None, r.get("rank") or 0))
    cmd = " ".join(" ".join(command).split())
    if len(cmd) > 48:
        cmd = cmd[:45] + "..."
    lines = ["=" * WIDTH, f"hvliterun: {cmd or 'the job'} FAILED (exit status {returncode})",
             "-" * WIDTH]
    for rec in shown:
        line = f"  {_rank(rec)} on {rec.get('host', '?')}: {_status(rec, root)}"
        if rec.get("first_error"):
            line += f": {rec['first_error']}"
        if rec is root:
            line += "   <- first to fail"
        lines.append(line)
    seen = {r.get("rank") for r in records}
    if size:
        missing = [r for r in range(size) if r not in seen]
        if missing:
            ranks = ", ".join(map(str, missing))
            lines.append(f"  rank{'s' if len(missing) > 1 else ''} {ranks}: no record (not started, "
                         "or killed before writing one)")
    ok = sum(1 for r in records if r.get("state") == "exited" and not failed(r))
    if ok:
        lines.append(f"  ({ok} other rank{'s' if ok > 1 else ''} exited 0)")
    lines.append("-" * WIDTH)
    if root is not None:
        how = root["signal"] if root.get("signal") else (
            f"exit code {root['exit_code']}" if root.get("state") == "exited"
            else "killed by mpiexec after its error")
        first = f"{_rank(root)} on {root.get('host', '?')}, {how}"
        if root.get("first_error"):
            first += f": {root['first_error']}"
        lines.append(f"root cause: hvliterun received {signal_name} and passed it to the job "
                     f"(first to end: {first})" if signal_name else
                     f"root cause (first to fail): {first}")
    elif signal_name:
        lines.append(f"root cause: hvliterun received {signal_name} and passed it to the job")
    else:
        lines.append("root cause: unknown (no rank recorded a failure; see mpiexec's messages above)")
    lines.append("=" * WIDTH)
    return "\n".join(lines)
