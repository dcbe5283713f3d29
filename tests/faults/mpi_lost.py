"""Rank side (a plain script) of the lost-rank and stall matrix. Every rank runs a stream of
all-reduces (FAULT_SIZE elements of float32, named, synchronous; FAULT_COLLECTIVE=broadcast,
allgather, reducescatter or alltoall for a stream of those instead); at step FAULT_STEP the victim
rank (FAULT_VICTIM) goes away as FAULT_HOW says:

  sigkill / exit3 / exit0   SIGKILL itself, os._exit(3), os._exit(0)
  sigstop                   SIGSTOP itself (from a timer thread, in the middle of a collective)
  raise                     raise ValueError before submitting its next collective
  return                    leave the loop and exit normally without calling shutdown()
  silent                    stay alive and submit nothing for FAULT_SILENT seconds (a stall)
  join                      join(); the others' allgather must fail naming it, then they exit
                            without joining, and the victim's join() must fail at once

Every other rank reports one JSON line, `FAULT {...}`: the exception it got, its message and the
seconds from the victim's departure (the wall clock, shared by the ranks of one machine), then
exits with status 1 (a LostRankError makes hvlite end the process with status 1 at exit)."""
import glob
import json
import os
import signal
import sys
import threading
import time

import numpy as np

import hvlite as hvd

hvd.init()
RANK, N = hvd.rank(), hvd.size()
HOW = os.environ["FAULT_HOW"]
VICTIM = int(os.environ["FAULT_VICTIM"]) % N
SIZE = int(os.environ.get("FAULT_SIZE", "1024"))
STEP = int(os.environ.get("FAULT_STEP", "20"))
SILENT = float(os.environ.get("FAULT_SILENT", "0"))
DEPARTED = os.environ["FAULT_DEPARTED"]        # a file: the victim writes the time it left
COLLECTIVE = os.environ.get("FAULT_COLLECTIVE", "allreduce")


def report(error, message, after=0.0):
    """One FAULT line, written at once (print's separate newline write would interleave)."""
    line = "FAULT " + json.dumps({"rank": RANK, "error": error, "message": message, "after": after})
    os.write(1, (line + "\n").encode())


def depart():
    with open(DEPARTED + ".tmp", "w") as f:
        f.write(repr(time.time()))
    os.replace(DEPARTED + ".tmp", DEPARTED)


def victim_step():
    if HOW == "sigstop":
        # stop a little later, from another thread: most likely inside the next collective
        def stop():
            depart()
            os.kill(os.getpid(), signal.SIGSTOP)
        threading.Timer(0.005, stop).start()
        return
    depart()
    sys.stdout.flush()
    if HOW == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif HOW == "exit3":
        os._exit(3)
    elif HOW == "exit0":
        os._exit(0)
    elif HOW == "raise":
        raise ValueError(f"rank {RANK} failed before submitting")
    elif HOW == "return":
        sys.exit(0)
    elif HOW == "silent":
        time.sleep(SILENT)
        try:
            hvd.allreduce(np.ones(SIZE, np.float32), name=f"step.{STEP}")
            report(None, "no error")
        except hvd.HvliteError as e:
            report(type(e).__name__, str(e))
        sys.exit(0)


def join_step():
    if RANK == VICTIM:
        depart()
        try:
            hvd.join()
            report(None, "join returned")
        except hvd.HvliteError as e:
            report(type(e).__name__, str(e), time.time() - float(open(DEPARTED).read()))
        sys.exit(1)
    while not os.path.exists(DEPARTED):
        time.sleep(0.01)
    try:
        hvd.allgather(np.ones((1, 2)), name="after.join")
        report(None, "allgather ran with a joined rank")
    except hvd.HvliteError as e:
        report(type(e).__name__, str(e), time.time() - float(open(DEPARTED).read()))
    sys.exit(0)     # without joining: the joined rank must not wait for ever


x = np.ones(SIZE, np.float32)
try:
    for step in range(100000):
        if HOW == "join" and step == STEP:
            join_step()
        if RANK == VICTIM and step == STEP:
            victim_step()
        if COLLECTIVE == "broadcast":
            hvd.broadcast_(x, root_rank=step % N, name=f"step.{step}")
        elif COLLECTIVE == "allgather":
            hvd.allgather(x, name=f"step.{step}")
        elif COLLECTIVE == "reducescatter":
            hvd.reducescatter(x, op=hvd.Sum, name=f"step.{step}")
        elif COLLECTIVE == "alltoall":
            hvd.alltoall(x[:x.size // N * N], name=f"step.{step}")
        else:
            hvd.allreduce(x, op=hvd.Sum, name=f"step.{step}")
        if step > STEP + 2000:
            break
    report(None, "no error")
except hvd.HvliteError as e:
    left = float(open(DEPARTED).read()) if os.path.exists(DEPARTED) else time.time()
    report(type(e).__name__, str(e), time.time() - left)
    # the first survivor to exit makes mpiexec end the rest: let them speak. A stopped rank's
    # survivors each must, so they wait (20 s at most) until all N-1 have; others get 1 s.
    open(f"{DEPARTED}.spoke.{RANK}", "w").close()
    deadline = time.time() + (20 if HOW == "sigstop" else 1)
    while time.time() < deadline:
        if HOW == "sigstop" and len(glob.glob(f"{DEPARTED}.spoke.*")) >= N - 1:
            break
        time.sleep(0.05)
    sys.exit(1)
