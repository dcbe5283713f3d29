"""The state a job commits and rolls back to: Horovod's State / ObjectState, and NumpyState for
hvlite.optim (named NumPy parameters and an optimizer's state).

A State is three operations on a snapshot of the training state: `commit()` takes a snapshot,
writes it durably (each rank its own copy, hvlite/elastic/store.py) and checks for new hosts;
`restore()` puts the last snapshot back in place; `sync()`, at the start of every launch, agrees
with the other ranks on the newest commit every survivor holds, broadcasts it from one of them
and restores it everywhere, so new ranks start from it too. Subclasses say what a snapshot is
(`_capture`) and how it is put back (`_apply`).
"""
import copy
import json
import os
import pickle
import sys
import time

import numpy as np

from hvlite import collectives, runtime, timeline
from hvlite.elastic import store as _store
from hvlite.errors import HostsUpdatedInterrupt
from hvlite.ops import Max

DIR_ENV = "HVLITE_ELASTIC_DIR"          # where commits go (hvliterun --elastic always sets it)
RESTART_ENV = "HVLITE_ELASTIC_RESTART"  # launches before this one (set by hvliterun --elastic)
CAUSE_ENV = "HVLITE_ELASTIC_CAUSE"      # why this launch happened (set by hvliterun --elastic)
NOTICE = "hosts-updated"                # hvliterun writes it: more slots are available
STOPPED = "stopped-for-hosts"           # rank 0 writes it: the job stopped at a commit for them


def elastic_dir():
    """The commit directory, or None: commits then live in memory only."""
    return os.environ.get(DIR_ENV) or None


def restarts():
    """How many launches came before this one under hvliterun --elastic; None outside it."""
    value = os.environ.get(RESTART_ENV, "")
    return int(value) if value.isdigit() else None


class State:
    """Horovod's elastic State: commit(), restore(), sync(), register_reset_callbacks()."""

    def __init__(self):
        self._reset_callbacks = []
        self._saved = None          # the last commit (or sync) in memory, for restore()
        self._commit = 0            # the id of the last commit (0: none yet)
        self._store = None
        self.restored = None        # what the last sync() restored (a dict), or None

    # -- what a snapshot is: subclasses ---------------------------------------------------------

    def _capture(self):
        """A snapshot of the live state that later changes to it do not touch (copies)."""
        raise NotImplementedError

    def _apply(self, payload):
        """Put a snapshot back into the live objects (in place where others hold them)."""
        raise NotImplementedError

    # -- Horovod's API --------------------------------------------------------------------------

    @property
    def commit_id(self):
        """The id of the last commit (made or restored) on this rank; 0 before the first."""
        return self._commit

    def save(self):
        """Snapshot the state in memory (what restore() returns to); commit() also writes it."""
        self._saved = self._capture()

    def restore(self):
        """Put the last commit (or synced state) back in place, in memory."""
        if self._saved is not None:
            self._apply(self._saved)

    def commit(self):
        """Snapshot the state and make it durable before returning: every rank writes its own
        copy atomically under HVLITE_ELASTIC_DIR. Then a small collective, which keeps the ranks'
        commits in step (a commit returns on no rank before every rank has written it) and
        raises HostsUpdatedInterrupt on every rank if hvliterun found more slots."""
        rt = runtime.current()
        with timeline.span("elastic.commit"):
            self.save()
            self._commit += 1
            store = self._get_store(rt)
            if store is not None:
                payload = {"meta": {"commit": self._commit, "size": rt.size, "time": time.time()},
                           "state": self._saved}
                store.write(self._commit, lambda f: pickle.dump(payload, f, protocol=5))
        self.check_host_updates()

    def check_host_updates(self):
        """Raise HostsUpdatedInterrupt on every rank when hvliterun has posted new hosts (rank
        0 looks; an all-reduce tells the others, so all ranks raise at the same commit)."""
        rt = runtime.current()
        d = elastic_dir()
        posted = int(rt.rank == 0 and d is not None and os.path.exists(os.path.join(d, NOTICE)))
        flag = collectives.allreduce(np.array([posted], np.int32), op=Max,
                                     name="elastic.hosts_updated")
        if int(flag[0]):
            raise HostsUpdatedInterrupt(skip_sync=False)

    def sync(self):
        """Start this launch from the newest commit every surviving rank holds (see
        store.agree), broadcast from one of them, or from rank 0's state when there is none.
        Every rank ends with the same state, the same commit id, and a copy of that commit."""
        from hvlite._core.trace import now
        rt = runtime.current()
        t0, wall0 = now(), time.time()
        store = self._get_store(rt)
        view = (store.generation(), store.commits()) if store is not None else (None, [])
        views = collectives.allgather_object(view, name="elastic.sync.views")
        chosen, root, newest, survivors = _store.agree(views)
        if chosen is None:
            root = 0
            blob = pickle.dumps({"meta": {"commit": 0, "size": rt.size}, "state": self._capture()},
                                protocol=5) if rt.rank == 0 else None
        else:
            blob = store.read(chosen) if rt.rank == root else None
        blob = collectives.broadcast_object(blob, root, name="elastic.sync.state")
        payload = pickle.loads(blob)
        if store is not None:
            store.prune_after(chosen if rt.rank in survivors else None)
            if chosen is not None and chosen not in store.commits():
                store.write(chosen, [blob])
            store.set_generation((newest or 0) + 1)
        self._apply(payload["state"])
        self._saved = payload["state"]
        self._commit = chosen or 0
        self.restored = {"commit": self._commit, "root": root, "size": rt.size,
                         "committed_size": payload["meta"].get("size"),
                         "restart": restarts(), "cause": os.environ.get(CAUSE_ENV),
                         "seconds": time.time() - wall0, "bytes": len(blob)}
        self._report(rt, t0, now())

    def _report(self, rt, t0, t1):
        """Rank 0 says what it restored after a restart; the timeline marks it on its own row."""
        info = self.restored
        k = info["restart"]
        what = (f"restored commit {info['commit']} from rank {info['root']}" if info["commit"]
                else "no commit to restore: starting from rank 0's state")
        if rt.rank == 0 and k:
            print(f"hvlite.elastic: launch {k} ({info['cause'] or 'cause unknown'}): {what} on "
                  f"{rt.size} ranks in {info['seconds']:.2f} s", file=sys.stderr, flush=True)
        tl = rt.timeline
        if tl is not None and tl.active:        # the cause goes in args: names are kept short
            tl.writer.span(f"elastic.sync (launch {k or 0})", t0, t1, row="elastic",
                           args=json.dumps({k2: v for k2, v in info.items() if k2 != "seconds"}))

    def register_reset_callbacks(self, callbacks):
        """Functions called after the job was relaunched (on a failure or new hosts) and the
        state restored, e.g. to rescale the learning rate to the new size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def reset(self):
        """Subclasses' own reaction to a relaunch (nothing by default)."""

    def _get_store(self, rt):
        d = elastic_dir()
        if d is None:
            return None
        if self._store is None or self._store.root != d:
            self._store = _store.Store(d, rt.rank)
        return self._store


class ObjectState(State):
    """Picklable attributes, given as keyword arguments: `ObjectState(epoch=0, batch=0)`; the
    training loop reads and sets `state.epoch`."""

    def __init__(self, **kwargs):
        super().__init__()
        self._object_names = sorted(kwargs)
        for name, value in kwargs.items():
            setattr(self, name, value)

    def _capture(self):
        return {name: copy.deepcopy(getattr(self, name)) for name in self._object_names}

    def _apply(self, payload):
        for name, value in payload.items():
            setattr(self, name, copy.deepcopy(value))


class NumpyState(ObjectState):
    """hvlite.optim's state: named NumPy parameters ({name: array}, restored in place, so the
    model and DistributedOptimizer keep their references), an optimizer's state_dict (a plain
    Optimizer, or the one a DistributedOptimizer wraps), and picklable attributes as in
    ObjectState."""

    def __init__(self, params, optimizer=None, **kwargs):
        for reserved in ("params", "optimizer"):
            if reserved in kwargs:
                raise TypeError(f"NumpyState: {reserved!r} is the state's own argument")
        self.params = params
        if optimizer is not None and not hasattr(optimizer, "state_dict"):
            optimizer = getattr(optimizer, "optimizer", optimizer)       # DistributedOptimizer
        if optimizer is not None and not hasattr(optimizer, "load_state_dict"):
            raise TypeError(f"NumpyState: {type(optimizer).__name__} has no state_dict() / "
                            "load_state_dict()")
        self.optimizer = optimizer
        super().__init__(**kwargs)

    def _capture(self):
        return {"params": {n: np.array(a, copy=True) for n, a in self.params.items()},
                "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
                "objects": super()._capture()}

    def _apply(self, payload):
        saved = payload["params"]
        if sorted(saved) != sorted(self.params):
            raise ValueError(f"NumpyState: the commit holds parameters {sorted(saved)}, the model "
                             f"has {sorted(self.params)}")
        for name, value in saved.items():
            live = self.params[name]
            if live.shape != value.shape:
                raise ValueError(f"NumpyState: parameter {name!r} has shape {live.shape}, the "
                                 f"commit {value.shape}")
            np.copyto(live, value)
        if self.optimizer is not None and payload["optimizer"] is not None:
            self.optimizer.load_state_dict(payload["optimizer"])
        super()._apply(payload["objects"])
