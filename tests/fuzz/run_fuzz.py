"""`make fuzz`: the fuzzer (tests/fuzz/mpi_fuzz.py) over many seeds at several rank counts, with
a hard timeout per launch, and the totals: operations, mismatches, hangs, crashes.

    python tests/fuzz/run_fuzz.py --np 2 3 4 --seeds 100 --ops 200

Seeds run in chunks, one mpiexec launch per chunk, the launches taking turns over VARIANTS:
settings that change how results are computed (node layout, segment and fusion sizes, the
response cache), never what they must be. A launch whose ranks all print their FUZZ line counts
its operations and mismatches; one that reports HANG or outlives its timeout is a hang (its
process group is killed); any other exit without every FUZZ line is a crash. Exits 1 unless
all three counts are zero.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "fuzz", "mpi_fuzz.py")

VARIANTS = {
    "default": {},
    "nodes-of-2": {"HVLITE_LOCAL_SIZE": "2"},
    "small-segments": {"HVLITE_SEGMENT_BYTES": "65536", "HVLITE_SHM_SEGMENT_BYTES": "65536",
                       "HVLITE_FUSION_TENSOR_LIMIT": "4096"},
    "tiny-cache": {"HVLITE_CACHE_CAPACITY": "3", "HVLITE_FUSION_THRESHOLD": "4096"},
}

FUZZ_LINE = re.compile(r"FUZZ rank=(\d+) seeds=\S+ ops=(\d+) ran=(\d+) mismatches=(\d+)")
REPORT_LINE = re.compile(r"(?:MISMATCH|HANG) [^\n]*")


def fuzz_lines(out):
    """{rank: (ops, ran, mismatches)} from the FUZZ lines in a launch's output (mpiexec may
    run two ranks' lines together, so they are found anywhere)."""
    return {int(r): (int(o), int(d), int(m)) for r, o, d, m in FUZZ_LINE.findall(out)}


def classify(n, rc, out):
    """(verdict, operations, mismatches) of one launch: verdict is ok, mismatch, hang or
    crash. rc None: killed at its timeout."""
    if rc is None or "HANG rank=" in out:
        return "hang", 0, 0
    lines = fuzz_lines(out)
    if sorted(lines) != list(range(n)) or rc not in (0, 1):
        return "crash", 0, 0
    ops = lines[0][0]
    mismatches = max(m for _, _, m in lines.values())
    if (mismatches > 0) != (rc == 1):
        return "crash", ops, mismatches
    return ("mismatch" if mismatches else "ok"), ops, mismatches


def mpiexec_path(given=None):
    found = given or os.environ.get("HVLITE_MPIEXEC")
    if not found:
        here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        found = here if os.path.exists(here) else shutil.which("mpiexec")
    if not found:
        sys.exit("run_fuzz: no mpiexec found (run `make install`, or set HVLITE_MPIEXEC)")
    return os.path.abspath(found) if os.sep in found else found


def launch(mpiexec, n, seeds, ops, env, timeout):
    """(exit status or None on timeout, output, seconds)."""
    cmd = [mpiexec, "-n", str(n), sys.executable, SCRIPT, "--seeds", seeds, "--ops", str(ops)]
    full = dict(os.environ, PYTHONUNBUFFERED="1", **env)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = None
    return rc, out, time.monotonic() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--np", type=int, nargs="+", default=[2, 3, 4], help="rank counts")
    ap.add_argument("--seeds", type=int, default=20, help="seeds per rank count")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--ops", type=int, default=200, help="operations per seed")
    ap.add_argument("--chunk", type=int, default=10, help="seeds per launch")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per launch")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--mpiexec", default=None)
    args = ap.parse_args(argv)
    mpiexec = mpiexec_path(args.mpiexec)

    totals = {}
    t_all = time.monotonic()
    for n in args.np:
        t = totals[n] = {"launches": 0, "operations": 0, "mismatches": 0, "hangs": 0,
                         "crashes": 0}
        first, last = args.first_seed, args.first_seed + args.seeds - 1
        for k, lo in enumerate(range(first, last + 1, args.chunk)):
            hi = min(lo + args.chunk - 1, last)
            variant = args.variants[k % len(args.variants)]
            seeds = f"{lo}-{hi}"
            rc, out, secs = launch(mpiexec, n, seeds, args.ops, VARIANTS[variant], args.timeout)
            verdict, ops, mismatches = classify(n, rc, out)
            t["launches"] += 1
            t["operations"] += ops
            t["mismatches"] += mismatches
            t["hangs"] += verdict == "hang"
            t["crashes"] += verdict == "crash"
            why = "" if rc is not None else f" (killed after {args.timeout:.0f}s)"
            print(f"fuzz np={n} seeds {seeds} [{variant}]: {verdict}{why}, {ops} operations, "
                  f"{mismatches} mismatches, {secs:.1f}s", flush=True)
            if verdict != "ok":
                reports = REPORT_LINE.findall(out)
                shown = reports[:20] if reports else out.splitlines()[-40:]
                print("\n".join("    " + line for line in shown), flush=True)
                settings = "".join(f"{var}={val} " for var, val in VARIANTS[variant].items())
                print(f"    replay: {settings}mpiexec -n {n} python tests/fuzz/mpi_fuzz.py "
                      f"--seeds {seeds} --ops {args.ops}", flush=True)
    print(f"fuzz totals ({time.monotonic() - t_all:.0f}s, {args.ops} operations per seed):")
    for n, t in totals.items():
        print(f"  np={n}: " + ", ".join(f"{k} {v}" for k, v in t.items()))
    grand = {k: sum(t[k] for t in totals.values()) for k in
             ("operations", "mismatches", "hangs", "crashes")}
    print("  all:  " + ", ".join(f"{k} {v}" for k, v in grand.items()), flush=True)
    return 1 if grand["mismatches"] or grand["hangs"] or grand["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
