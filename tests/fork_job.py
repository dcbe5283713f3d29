"""A job whose ranks fork children after init() (run by tests/test_fork.py as a plain script:
each child must leave the way a real program does, an uncaught exception included). Every
child calls hvlite and gets ForkedChildError at once while the answers it inherited (rank,
size) still work; it leaves by sys.exit, a normal return, os._exit, an uncaught exception or
a multiprocessing worker's end, each without disturbing the parents' job: they run 30 checked
all-reduces after each child and shut down cleanly (MPI_Finalize included, which a child's own
finalize would break). Rank 0 prints 'fork job: N ok' when every rank agrees."""
import atexit
import multiprocessing
import os
import sys
import tempfile

import numpy as np

import hvlite as hvd

ROUTES = {"sys.exit": 7, "return": 0, "os._exit": 7, "raise": 1, "multiprocessing": 0}


def child_calls(report):
    """In the child: what each call did, one line each."""
    lines = [f"rank {hvd.rank()} size {hvd.size()}"]
    for what, call in (("allreduce", lambda: hvd.allreduce(np.ones(4))),
                       ("allreduce_async", lambda: hvd.allreduce_async(np.ones(4)).synchronize()),
                       ("barrier", hvd.barrier),
                       ("broadcast_object", lambda: hvd.broadcast_object(1)),
                       ("init", hvd.init),
                       ("shutdown then allreduce", lambda: (hvd.shutdown(),
                                                            hvd.allreduce(np.ones(4))))):
        try:
            call()
            lines.append(f"{what}: returned")
        except hvd.ForkedChildError as e:
            ok = f"initialized in process {os.getppid()}" in str(e) and "forked" in str(e)
            lines.append(f"{what}: ForkedChildError{'' if ok else ' without the pids: ' + str(e)}")
        except BaseException as e:      # noqa: BLE001 - reported to the parent
            lines.append(f"{what}: {type(e).__name__}: {e}")
    with open(report, "w") as f:
        f.write("\n".join(lines))


def check_child(report, status, want, rank, n):
    try:
        with open(report) as f:
            lines = f.read().splitlines()
    except OSError as e:
        return [f"no report from the child: {e}"]
    bad = [] if status == want else [f"the child exited {status}, not {want}"]
    if lines[:1] != [f"rank {rank} size {n}"]:
        bad.append(f"the child's rank/size: {lines[:1]}")
    return bad + [ln for ln in lines[1:] if not ln.endswith(": ForkedChildError")]


def parents_job(tag, rank, n):
    for i in range(30):
        x = hvd.allreduce(np.full(1 << 12, rank + i, np.float32), op=hvd.Sum, name=f"{tag}.{i}")
        if not np.all(x == n * i + n * (n - 1) / 2):
            return [f"{tag} call {i}: {x[:3]}"]
    return []


def main():
    hvd.init()
    rank, n = hvd.rank(), hvd.size()
    tmp = tempfile.mkdtemp(prefix="hvlite-fork-")
    failures = []
    for route, want in ROUTES.items():
        report = os.path.join(tmp, f"{route}.{rank}")
        hvd.barrier()
        if route == "multiprocessing":
            p = multiprocessing.get_context("fork").Process(target=child_calls, args=(report,))
            p.start()
            p.join(60)
            status = p.exitcode
        else:
            pid = os.fork()
            if pid == 0:
                atexit.register(lambda: None)               # a handler of the child's own
                child_calls(report)
                if route == "sys.exit":
                    sys.exit(7)
                if route == "os._exit":
                    os._exit(7)
                if route == "raise":
                    sys.stderr = open(os.devnull, "w")      # the traceback is expected
                    raise RuntimeError("the child fails")
                return "child"                              # off the end of the script
            status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        failures += [f"{route}: {f}" for f in check_child(report, status, want, rank, n)]
        failures += parents_job(route, rank, n)
    everyone = hvd.allgather_object(failures)
    if rank == 0:
        bad = [f"rank {r}: {f}" for r, fs in enumerate(everyone) for f in fs]
        print("\n".join(bad) if bad else f"fork job: {n} ok", flush=True)
    hvd.shutdown()
    return "parent"


if __name__ == "__main__":
    main()
