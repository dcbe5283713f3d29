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
import sys
import time
import warnings

import numpy as np

from hvlite import collectives, runtime, timeline
from hvlite.elastic import codec
from hvlite.elastic import store as _store
from hvlite.elastic.store import CommitError
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

    def __init__(self, *, trusted=False):
        self._trusted = bool(trusted)   # commits may hold any object (read with full pickle)
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

    @property
    def trusted(self):
        """Whether this state's commits may hold any object (read back with the full unpickler,
        which runs what a file names) rather than NumPy arrays, tensors and plain data only."""
        return self._trusted

    def commit(self):
        """Snapshot the state and make it durable before returning: every rank writes its own
        copy atomically under HVLITE_ELASTIC_DIR. Then a small collective, which keeps the ranks'
        commits in step (a commit returns on no rank before every rank has written it), raises
        CommitError on every rank if the commit failed on any (a disk error, or an object a
        commit may not hold without trusted=True), and raises HostsUpdatedInterrupt on every
        rank if hvliterun found more slots."""
        rt = runtime.current()
        failed, commit_id = None, self._commit + 1
        with timeline.span("elastic.commit"):
            snapshot = self._capture()
            try:
                store = self._get_store(rt)
                if store is not None:
                    meta = {"commit": commit_id, "size": rt.size, "time": time.time()}
                    store.write(commit_id, codec.encode(meta, snapshot, self._trusted))
            except Exception as e:              # every rank raises it below: no rank waits
                failed = f"{type(e).__name__}: {e}"
        posted, failed_rank = self._flags(failed)
        if failed_rank:
            _raise_everywhere(failed, f"commit {commit_id} failed", "elastic.commit")
        self._saved, self._commit = snapshot, commit_id
        if posted:
            raise HostsUpdatedInterrupt(skip_sync=False)

    def check_host_updates(self):
        """Raise HostsUpdatedInterrupt on every rank when hvliterun has posted new hosts (rank
        0 looks; an all-reduce tells the others, so all ranks raise at the same commit)."""
        if self._flags(None)[0]:
            raise HostsUpdatedInterrupt(skip_sync=False)

    def _flags(self, failed):
        """One all-reduce: (new hosts posted, seen by rank 0; 1 + the highest rank whose commit
        failed, or 0)."""
        rt = runtime.current()
        d = elastic_dir()
        posted = int(rt.rank == 0 and d is not None and os.path.exists(os.path.join(d, NOTICE)))
        flag = collectives.allreduce(np.array([posted, 0 if failed is None else rt.rank + 1],
                                              np.int32), op=Max, name="elastic.hosts_updated")
        return int(flag[0]), int(flag[1])

    def sync(self):
        """Start this launch from the newest commit every surviving rank holds whole (see
        store.agree), broadcast from one of them, or from rank 0's state when there is none.
        Every rank ends with the same state, the same commit id, and a copy of that commit; or
        every rank raises CommitError (a commit refused, a rank whose directory failed)."""
        from hvlite._core.trace import now
        rt = runtime.current()
        t0, wall0 = now(), time.time()
        store, view, problem = None, (None, []), None
        try:
            store = self._get_store(rt)
            if store is not None:
                view = (store.generation(), store.intact_commits())
        except Exception as e:
            problem = f"{type(e).__name__}: {e}"
        gathered = collectives.allgather_object((view, problem, self._trusted),
                                                name="elastic.sync.views")
        problems = [f"rank {r}: {p}" for r, (_, p, _) in enumerate(gathered) if p]
        if problems:
            raise CommitError("elastic sync: " + "; ".join(problems))
        if len({t for _, _, t in gathered}) > 1:
            raise CommitError("elastic sync: the ranks' states disagree on trusted= (ranks "
                              f"{[r for r, (_, _, t) in enumerate(gathered) if t]} trusted)")
        views = [v for v, _, _ in gathered]
        chosen, root, newest, survivors = _store.agree(views)
        root = 0 if chosen is None else root
        # rank 0's live state is a peer's message, trusted as object collectives are; a file is
        # read with the restricted reader unless the state is trusted
        trusted = self._trusted or chosen is None
        offer = decoded = None
        if rt.rank == root:                 # the offer, checked here first: all raise, or none
            try:
                if chosen is None:
                    source = f"rank {root}'s state"
                    blob = b"".join(codec.encode({"commit": 0, "size": rt.size}, self._capture(),
                                                 trusted=True))
                else:
                    source = store.commit_path(chosen)
                    blob = store.read(chosen)
                decoded = codec.decode(blob, trusted, source)
                offer = ("ok", blob, source)
            except Exception as e:
                offer = ("error", f"{type(e).__name__}: {e}", None)
        offer = collectives.broadcast_object(offer, root, name="elastic.sync.state")
        if offer[0] != "ok":
            raise CommitError(f"elastic sync: rank {root} cannot offer "
                              + (f"commit {chosen}" if chosen else "its state")
                              + f": {offer[1]}")
        _, blob, source = offer
        failed = None
        try:
            meta, payload = decoded or codec.decode(blob, trusted, source)
            if store is not None:
                held = store.commits()
                if chosen is None and held:
                    self._set_aside(rt, store, views, survivors, newest)
                else:
                    store.prune_after(chosen if rt.rank in survivors else None)
                if chosen is not None and chosen not in store.commits():
                    store.write(chosen, [blob])
                store.set_generation((newest or 0) + 1)
            self._apply(payload)
        except Exception as e:
            failed = f"{type(e).__name__}: {e}"
        _raise_everywhere(failed, f"restoring {'commit ' + str(chosen) if chosen else 'the state'}"
                          " failed", "elastic.sync.done")
        self._saved = payload
        self._commit = chosen or 0
        self.restored = {"commit": self._commit, "root": root, "size": rt.size,
                         "committed_size": meta.get("size"),
                         "restart": restarts(), "cause": os.environ.get(CAUSE_ENV),
                         "seconds": time.time() - wall0, "bytes": len(blob)}
        self._report(rt, t0, now())

    @staticmethod
    def _set_aside(rt, store, views, survivors, newest):
        """The survivors share no commit: this rank's commits are moved aside, not deleted."""
        moved = store.set_aside((newest or 0) + 1)
        held = {r: ids for r, (_, ids) in enumerate(views) if r in survivors}
        warnings.warn(
            f"hvlite.elastic: rank {rt.rank}: the surviving ranks hold no commit in common "
            f"(whole commits held: {held}); the job starts over from rank 0's state, and this "
            f"rank's {len(moved)} commit file(s) are kept in "
            f"{os.path.dirname(moved[0]) if moved else store.path}", _store.CommitWarning,
            stacklevel=3)

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
    """Attributes given as keyword arguments: `ObjectState(epoch=0, batch=0)`; the training loop
    reads and sets `state.epoch`. A commit on disk holds plain data only (numbers, strings,
    containers, NumPy arrays: hvlite/elastic/codec.py); `trusted=True` allows any picklable
    object, read back with the full unpickler (docs/elastic.md#what-a-commit-holds)."""

    def __init__(self, *, trusted=False, **kwargs):
        super().__init__(trusted=trusted)
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

    def __init__(self, params, optimizer=None, *, trusted=False, **kwargs):
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
        super().__init__(trusted=trusted, **kwargs)

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


def _raise_everywhere(failed, what, name):
    """After a step every rank took: if it failed on any rank (`failed`: this rank's message or
    None), raise CommitError on every rank, naming each failed rank and why (a collective: every
    rank calls it, or none)."""
    messages = collectives.allgather_object(failed, name=name + ".errors")
    bad = [f"rank {r}: {m}" for r, m in enumerate(messages) if m]
    if bad:
        raise CommitError(f"{what}: " + "; ".join(bad))
