"""A job in which one rank fails on purpose, for hvliterun's failure summary:
`python faulty.py HOW VICTIM MARKER` (MARKER only makes the job's processes findable).

HOW: kill (SIGKILL itself mid-stream of allreduces), raise (ValueError("boom") there), exit
(os._exit(3) there), exit0 (os._exit(0) there: no shutdown, no MPI_Finalize); ps-kill (a parameter-server job; VICTIM, a server, SIGKILLs itself while
serving), ps-raise (a parameter-server job; VICTIM, a worker, raises ValueError("boom")).

With FAULTY_REPORT_DIR set, each rank writes there, once set up, its pid and the /dev/shm files
it maps: what the job could leave behind, whatever other jobs do in /dev/shm meanwhile."""
import json
import os
import signal
import sys

import numpy as np

how, victim = sys.argv[1], int(sys.argv[2])


def report(rank):
    where = os.environ.get("FAULTY_REPORT_DIR")
    if not where:
        return
    with open("/proc/self/maps") as f:
        shm = sorted({line.split(None, 5)[5].replace(" (deleted)", "").strip()
                      for line in f if "/dev/shm/" in line})
    with open(os.path.join(where, f"{rank}.json"), "w") as f:
        json.dump({"pid": os.getpid(), "shm": shm}, f)


def fail():
    sys.stderr.write("about to fail on purpose\n")         # a line that is not an error
    sys.stderr.flush()
    if how.endswith("kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    if how.endswith("raise"):
        raise ValueError("boom")
    os._exit(0 if how == "exit0" else 3)


if how.startswith("ps-"):
    import hvlite.ps as ps
    from hvlite.optim import SGD

    class FailingSGD(SGD):
        def step(self, params, grads):
            if self.steps == 3 and job.rank == victim:
                fail()
            super().step(params, grads)

    job = ps.init({"w": np.zeros(10)}, FailingSGD(0.1), mode="sync")
    report(job.rank)
    if job.is_server:
        job.serve()
    else:
        for step in range(1000):
            job.pull()
            if step == 3 and job.rank == victim:
                fail()
            job.push({"w": np.ones(10)})
        job.close()
else:
    import hvlite as hvd
    hvd.init()
    x = np.ones(4096)
    for step in range(100000):
        hvd.allreduce(x, op=hvd.Sum)
        if step == 2:
            report(hvd.rank())
        if step == 20 and hvd.rank() == victim:
            fail()
print("rank finished normally", flush=True)
