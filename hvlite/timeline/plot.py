"""A Gantt picture of a trace: per rank, compute spans above communication phases."""
from hvlite.timeline.report import COMPUTE_TID, is_communication, pid_order


def plot(events, path, title=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit("hvlite-timeline plot needs matplotlib: pip install 'hvlite[plot]'") from e
    ranks = sorted({e.get("pid", 0) for e in events if e.get("ph") == "X"}, key=pid_order)
    if not ranks:
        raise SystemExit("no duration events in the trace")
    t0 = min(float(e["ts"]) for e in events if e.get("ph") == "X")
    fig, ax = plt.subplots(figsize=(11, 1.2 + 1.1 * len(ranks)))
    labels, ticks = [], []
    for i, pid in enumerate(ranks):
        base = i * 3
        comp = [((float(e["ts"]) - t0) / 1e3, float(e.get("dur", 0)) / 1e3) for e in events
                if e.get("pid", 0) == pid and e.get("ph") == "X" and e.get("tid") == COMPUTE_TID]
        comm = [((float(e["ts"]) - t0) / 1e3, float(e.get("dur", 0)) / 1e3) for e in events
                if e.get("pid", 0) == pid and is_communication(e)]
        ax.broken_barh(comp, (base + 1.55, 0.9), facecolors="#4c72b0", label="compute" if i == 0 else None)
        ax.broken_barh(comm, (base + 0.55, 0.9), facecolors="#dd8452", label="communication" if i == 0 else None)
        ticks += [base + 1.0, base + 2.0]
        labels += [f"rank {pid} comm", f"rank {pid} compute"]
    ax.set_yticks(ticks, labels)
    ax.set_xlabel("time (ms)")
    ax.set_title(title or "hvlite timeline")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
