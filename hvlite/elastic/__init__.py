"""Elastic training under Horovod's names: a job that loses a rank rolls back to its last commit
and goes on; one that is given more hosts grows at its next commit.

    import hvlite as hvd
    hvd.init()
    state = hvd.elastic.NumpyState(model.params, optimizer, step=0)

    @hvd.elastic.run
    def train(state):
        while state.step < total:
            ...one step...
            state.step += 1
            if state.step % 20 == 0:
                state.commit()          # durable before it returns

    train(state)                        # under: hvliterun --elastic --min-np 2 --max-np 4 ...

MPI cannot shrink or grow a running job portably, and hvlite cannot go on in a process that has
lost a peer, so recovery is torchrun's: `hvliterun --elastic` (hvlite/run/elastic.py) watches
the job, and on a failure tears it down and relaunches it on the slots still there; `run` syncs
every new launch to the newest commit all survivors hold. New hosts are taken at a commit: every
rank raises HostsUpdatedInterrupt there, `run` stops the job cleanly, and hvliterun relaunches
it larger. See docs/elastic.md.
"""
import functools
import os
import sys

from hvlite import runtime
from hvlite.elastic.state import (CAUSE_ENV, DIR_ENV, NOTICE, RESTART_ENV, STOPPED, NumpyState,
                                  ObjectState, State, elastic_dir, restarts)
from hvlite.elastic.store import CommitError, CommitWarning, UnsafeDirectoryError, write_atomic
from hvlite.errors import HostsUpdatedInterrupt
from hvlite.errors import InternalError as HorovodInternalError


def run(func):
    """Horovod's `@hvd.elastic.run`: `func(state, ...)` runs from the state `state.sync()`
    agreed on (the newest commit every surviving rank holds, or rank 0's state on a first
    launch). After a relaunch the state's reset callbacks run once the state is restored.

    Under hvliterun --elastic: HostsUpdatedInterrupt (raised at a commit, on every rank) stops
    the job cleanly, status 0, with a note for hvliterun to relaunch it on more ranks; any other
    exception ends the process as usual and hvliterun relaunches the job from the last commit
    (a process that lost a peer cannot use MPI again, so nothing is retried in-process as
    Horovod does). Outside hvliterun --elastic, exceptions propagate."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state.sync()
        if restarts():
            state.on_reset()
        try:
            return func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            if restarts() is None:
                raise
            _stop_for_new_hosts(state)
        except HorovodInternalError as e:
            if restarts() is not None and runtime.is_initialized():
                print(f"hvlite.elastic: rank {runtime.current().rank}: {type(e).__name__}: {e}; "
                      f"hvliterun relaunches the job from commit {state.commit_id}",
                      file=sys.stderr, flush=True)
            raise
    return wrapper


def _stop_for_new_hosts(state):
    """Every rank is at the same commit: rank 0 tells hvliterun, all shut down and exit 0."""
    rt = runtime.current()
    if rt.rank == 0:
        d = elastic_dir()
        if d is not None:
            write_atomic(os.path.join(d, STOPPED), [str(state.commit_id).encode()])
        print(f"hvlite.elastic: hosts added: stopping at commit {state.commit_id} to relaunch "
              "on more ranks", file=sys.stderr, flush=True)
    runtime.shutdown()
    raise SystemExit(0)


__all__ = ["State", "ObjectState", "NumpyState", "run", "HostsUpdatedInterrupt",
           "HorovodInternalError", "elastic_dir", "restarts", "DIR_ENV", "RESTART_ENV",
           "CAUSE_ENV", "NOTICE", "STOPPED", "CommitError", "CommitWarning",
           "UnsafeDirectoryError"]
