"""hvlite-timeline: read hvlite traces back.

    hvlite-timeline summary trace.json [trace.rank1.json ...]
    hvlite-timeline plot trace.json [...] -o timeline.png
"""
import argparse
import sys
import warnings

from hvlite.timeline import report


def main(argv=None):
    p = argparse.ArgumentParser(prog="hvlite-timeline", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary", help="per-tensor table and the overlap figure")
    s.add_argument("traces", nargs="+")
    s.add_argument("--top", type=int, default=25)
    g = sub.add_parser("plot", help="Gantt picture of compute and communication per rank")
    g.add_argument("traces", nargs="+")
    g.add_argument("-o", "--output", default="timeline.png")
    args = p.parse_args(argv)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", report.TruncatedTraceWarning)
            events = report.load_many(args.traces)
    except (OSError, ValueError) as e:
        print(f"hvlite-timeline: cannot read trace: {e}", file=sys.stderr)
        return 2
    for w in caught:
        if issubclass(w.category, report.TruncatedTraceWarning):
            print(f"hvlite-timeline: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if args.cmd == "summary":
        print(report.summary_text(events, args.top))
    else:
        from hvlite.timeline.plot import plot
        plot(events, args.output)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
