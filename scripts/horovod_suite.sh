#!/usr/bin/env bash
# Horovod's own torch test suite (test/parallel/test_torch.py of Horovod v0.28.1) run against
# hvlite.torch: `import horovod.torch as hvd` in those tests resolves to a shim that re-exports
# hvlite.torch, and every rank runs pytest on the file under mpiexec.
#
# The tests are not part of this project; get a copy of them (outside this repository) with
#     git clone --depth 1 --branch v0.28.1 https://github.com/horovod/horovod.git horovod-0.28.1
# and pass its test/parallel directory (or its test directory):
#     scripts/horovod_suite.sh horovod-0.28.1/test/parallel 2
#     scripts/horovod_suite.sh horovod-0.28.1/test/parallel 2 -k "not duplicate"
#
# usage: scripts/horovod_suite.sh PATH_TO_HOROVOD_TEST_DIR [NP] [PYTEST_ARGS...]
#   NP defaults to 2; PYTEST_ARGS go to pytest on every rank (e.g. -k EXPR, -x).
# Environment: PYTHON (default: .venv/bin/python when present, else python3), MPIEXEC (default:
# the mpiexec next to PYTHON, else the one on PATH), SUITE_TIMEOUT (seconds for the whole run,
# default 300; past it every rank is killed), TEST_TIMEOUT (seconds per test: pytest-timeout's
# --timeout when that plugin is installed, else pytest's faulthandler_timeout, which prints every
# thread's stack of a test that runs longer but does not stop it; default 60), KEEP=1 keeps the
# temporary directory with the shim and each rank's log.
#
# The shim (a temporary directory put first on PYTHONPATH): horovod/__init__.py and
# horovod/torch.py re-exporting hvlite.torch, and the two small things Horovod's test/utils/
# common.py imports at module level: horovod.runner.util.threads.in_thread and `mock` (from
# unittest.mock, when the `mock` package is not installed).
#
# Prints, per rank, the passed/failed/skipped/error counts and the failed tests' names; a test
# that started and never finished on a rank (the run hit SUITE_TIMEOUT) is reported as hung.
# Exit status: 0 when every rank passed everything it ran, 1 otherwise, 2 on bad usage.
set -uo pipefail

usage() { sed -n '12,13p' "$0" | sed 's/^# \{0,1\}//'; }

[ $# -ge 1 ] || { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac
SRC="$1"; shift
NP=2
if [ $# -ge 1 ] && [[ "$1" =~ ^[0-9]+$ ]]; then NP="$1"; shift; fi

if [ -f "$SRC/test_torch.py" ]; then TESTDIR="$SRC"
elif [ -f "$SRC/parallel/test_torch.py" ]; then TESTDIR="$SRC/parallel"
else echo "no test_torch.py in $SRC or $SRC/parallel" >&2; exit 2; fi
TESTDIR="$(cd "$TESTDIR" && pwd)"

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
if [ -z "${MPIEXEC:-}" ]; then
  MPIEXEC="$(dirname "$(command -v "$PYTHON")")/mpiexec"
  [ -x "$MPIEXEC" ] || MPIEXEC="$(command -v mpiexec || true)"
fi
[ -n "$MPIEXEC" ] && [ -x "$MPIEXEC" ] || { echo "no mpiexec found (set MPIEXEC)" >&2; exit 2; }
SUITE_TIMEOUT="${SUITE_TIMEOUT:-300}"
TEST_TIMEOUT="${TEST_TIMEOUT:-60}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/horovod-suite.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then echo "shim and logs kept in $WORK"
else trap 'rm -rf "$WORK"' EXIT; fi
SHIM="$WORK/shim"
mkdir -p "$SHIM/horovod/runner/util" "$WORK/logs"
printf '"""Horovod names served by hvlite (a test shim)."""\n__version__ = "0.28.1"\n' \
  > "$SHIM/horovod/__init__.py"
printf '"""horovod.torch is hvlite.torch."""\nfrom hvlite.torch import *  # noqa: F401,F403\n' \
  > "$SHIM/horovod/torch.py"
: > "$SHIM/horovod/runner/__init__.py"
: > "$SHIM/horovod/runner/util/__init__.py"
cat > "$SHIM/horovod/runner/util/threads.py" <<'PY'
import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Horovod's helper: start target(*args) in a thread and return the thread."""
    t = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    t.start()
    return t
PY
if ! "$PYTHON" -c "import mock" 2>/dev/null; then
  echo "from unittest.mock import *  # noqa: F401,F403" > "$SHIM/mock.py"
fi

PER_TEST=(-o "faulthandler_timeout=$TEST_TIMEOUT")
if "$PYTHON" -c "import pytest_timeout" 2>/dev/null; then PER_TEST=(--timeout "$TEST_TIMEOUT"); fi

# One Python process per rank (the shell execs it), each writing its own log: the rank comes
# from the launcher's environment (MPICH/Hydra: PMI_RANK, Open MPI: OMPI_COMM_WORLD_RANK).
RANK_CMD='R=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-x$$}}}
exec "$0" "$@" > "$HVS_LOGS/rank$R.log" 2>&1'
echo "running $TESTDIR/test_torch.py on $NP ranks ($MPIEXEC, timeout ${SUITE_TIMEOUT}s," \
     "per test ${PER_TEST[*]})"
# In a session of its own, so that whatever outlives the timeout (mpiexec's proxies may put each
# rank in a process group of its own) is found by its session id and killed afterwards.
kill_session() {
  "$PYTHON" - "$1" <<'PY'
import os, signal, sys
sid = sys.argv[1]
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[3] == sid:
                os.kill(int(pid), signal.SIGKILL)
    except (OSError, IndexError):
        pass
PY
}
START=$(date +%s)
(
  cd "$TESTDIR" || exit 2
  export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 \
         COLUMNS=400 HVS_LOGS="$WORK/logs"
  exec setsid timeout -k 10 "$SUITE_TIMEOUT" "$MPIEXEC" -n "$NP" sh -c "$RANK_CMD" \
    "$PYTHON" -m pytest -v -rfE -p no:cacheprovider -o console_output_style=classic \
    "${PER_TEST[@]}" "$@" test_torch.py
) &
LAUNCH=$!
trap 'kill_session "$LAUNCH"; exit 130' INT TERM
wait "$LAUNCH"
RC=$?
kill_session "$LAUNCH"
TOOK=$(( $(date +%s) - START ))
[ "$RC" = 124 ] || [ "$RC" = 137 ] && echo "TIMED OUT after ${SUITE_TIMEOUT}s: every rank killed"
echo "mpiexec exit status $RC, wall time ${TOOK}s"

STATUS=0
[ "$RC" = 0 ] || STATUS=1
for log in $(ls "$WORK"/logs/rank*.log 2>/dev/null | sort -V); do
  r="$(basename "$log" .log)"
  "$PYTHON" - "$log" "$r" <<'PY' || STATUS=1
import re
import sys

path, rank = sys.argv[1], sys.argv[2]
text = open(path, errors="replace").read()
counts, failed, started = {}, [], None
OUTCOME = r"(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)"


def outcome(name, word):
    counts[word] = counts.get(word, 0) + 1
    if word in ("FAILED", "ERROR"):
        failed.append(f"{word} {name.split('::')[-1]}")


for line in text.splitlines():
    if re.match(r"^=+ .* =+$", line) and "test session starts" not in line:
        break                    # the run's end: failures, warnings and summary follow
    m = re.match(r"(test_torch\.py::\S+)(?: " + OUTCOME + r")?", line)
    if m and m.group(2):
        outcome(m.group(1), m.group(2))
        started = None
    elif m:
        started = m.group(1)     # running; its outcome follows on this line or a later one
    elif started:
        # a stack dump (faulthandler_timeout) or output came between name and outcome
        w = re.match(OUTCOME + r"(\s|$)", line)
        if w and "::" not in line:
            outcome(started, w.group(1))
            started = None
summary = re.findall(r"^=+ (.*(?:passed|failed|skipped|error|deselected|no tests ran).*) =+$",
                     text, re.M)
print(f"{rank}: passed {counts.get('PASSED', 0)}, failed {counts.get('FAILED', 0)}, "
      f"skipped {counts.get('SKIPPED', 0)}, errors {counts.get('ERROR', 0)}"
      + (f"; hung in {started.split('::')[-1]}" if started else "")
      + (f"  [pytest: {summary[-1]}]" if summary else "  [no pytest summary: killed]"))
for f in failed:
    print(f"  {f}")
reasons = re.findall(r"^(?:FAILED|ERROR) \S+::(\w+) - (.*)$", text, re.M)
for name, why in reasons:
    print(f"    {name}: {why[:200]}")
ok = not failed and not started and bool(summary) and "failed" not in summary[-1] \
    and "error" not in summary[-1]
sys.exit(0 if ok else 1)
PY
done
[ -n "$(ls "$WORK"/logs/rank*.log 2>/dev/null)" ] || { echo "no rank logs were written"; STATUS=1; }
exit $STATUS
