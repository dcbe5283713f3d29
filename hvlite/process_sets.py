"""Process sets: subsets of the ranks that run collectives among themselves, concurrently with
the global set and with each other, as in Horovod.

    evens = hvd.add_process_set([0, 2])          # every rank, in the same order
    hvd.allreduce(x, process_set=evens)          # ranks 0 and 2 only

Each set a rank belongs to has communicators of its own and a coordinator of its own (queue,
negotiation table, response cache, fusion buffer), on a thread of its own. A round is a blocking
collective over the set's ranks; sets sharing one thread would wait on each other in whatever
order each rank happened to reach them, and ranks that own different sets would deadlock. On
separate threads a set waits only for its own members, and an idle set sleeps.
"""
import dataclasses
import sys
import threading
import weakref

import numpy as np

from hvlite.errors import InvalidArgumentError, NotInitializedError
from hvlite.outputs import MIN_BYTES, OutputPool
from hvlite.config import ALGORITHMS
from hvlite.ops import ReduceOp


def _is_comm(obj):
    """An mpi4py communicator. mpi4py.MPI is looked up, never imported here: importing it
    starts MPI at its default thread level, before init() could set hvlite's."""
    MPI = sys.modules.get("mpi4py.MPI")
    return MPI is not None and isinstance(obj, MPI.Comm)


class ProcessSet:
    """Ranks (of the global communicator) that run collectives together. Make one from a list
    of ranks, then pass it to hvlite.init(process_sets=[...]) or hvlite.add_process_set(). Or,
    as in Horovod, from an mpi4py communicator (each rank its own, e.g. from Split; MPI's
    COMM_NULL on a rank outside every such set) for init(process_sets=[...]): init() makes one
    set of every distinct group the ranks' communicators hold, and this object becomes the one
    of this rank's communicator (its ranks are None until then)."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks):
        if _is_comm(ranks):
            self.mpi_comm = ranks
            self._runtime = None
            return
        if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
            raise InvalidArgumentError(f"ProcessSet needs a list of ranks or an mpi4py "
                                       f"communicator, got {ranks!r}")
        ranks = list(ranks)
        bad = [r for r in ranks if not isinstance(r, (int, np.integer)) or isinstance(r, bool)]
        if bad:
            raise InvalidArgumentError(f"ProcessSet: ranks must be integers, got {bad!r}")
        ranks = sorted(int(r) for r in ranks)
        dups = sorted({r for r in ranks if ranks.count(r) > 1})
        if dups:
            raise InvalidArgumentError(f"ProcessSet: rank(s) {dups} listed more than once")
        self.ranks = ranks
        self._runtime = None

    def _live(self):
        """The runtime this set is registered with, or None once removed or shut down."""
        rt = self._runtime() if self._runtime is not None else None
        if self.process_set_id is None or rt is None or rt.closed:
            return None
        return rt

    def size(self):
        """Number of ranks in the set; None when it is not registered."""
        return len(self.ranks) if self._live() else None

    def included(self):
        """Whether this rank belongs to the set, from its ranks, registered or not (Horovod's
        rule: a set made but not yet added, or removed, still answers); None while its ranks
        are unknown."""
        if self.ranks is None:
            return None
        rt = self._live() or global_process_set._live()
        if rt is None:
            raise NotInitializedError("hvlite has not been initialized; call hvlite.init() "
                                      "first")
        return rt.rank in self.ranks

    def rank(self):
        """This rank's position in the set (the index into allgather's result); None when the
        set is not registered. Collectives still take global ranks (broadcast's root_rank)."""
        rt = self._live()
        if rt is None:
            return None
        if rt.rank not in self.ranks:
            raise InvalidArgumentError(f"rank {rt.rank} is not part of process set "
                                       f"{self.process_set_id} (ranks {self.ranks})")
        return self.ranks.index(rt.rank)

    def invalidate(self):
        self.process_set_id = None
        self._runtime = None

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


AUTO_NAMES = 60
AUTO_MARK = ".noname."


def algorithm_code(algorithm, default, shm):
    """The core's code of algorithm= (None: `default`, the setting). InvalidArgumentError for a
    name hvlite does not know, or for 'shm' where the segment is unavailable (`shm`: the
    runtime's shm_info, agreed at init, so every rank raises alike)."""
    from hvlite._core.codes import ALGORITHMS as CODES
    name = default if algorithm is None else algorithm
    code = CODES.code(name)
    if code is None or name not in ALGORITHMS:
        raise InvalidArgumentError(
            f"unknown all-reduce algorithm {name!r}; use one of {', '.join(ALGORITHMS)}")
    if name == "shm" and not shm["available"]:
        raise InvalidArgumentError(f"all-reduce algorithm 'shm' is unavailable: {shm['why']}")
    return code


def _ride_bytes(comm, s, model, nodes, shm):
    """Room for small all-reduces in the negotiation message. On one node with the shared
    segment none: a small shared-memory all-reduce costs less than the region's bytes add to
    the agreement's messages (measured: 4 KiB riding 13.4 us a call, through the segment
    6.8 us). Across nodes the setting, capped at what one message latency moves on the network
    (alpha/beta of the cost model). The same on every rank (the message's layout depends on
    it)."""
    mine = s.piggyback_bytes
    if nodes <= 1 and shm:
        mine = 0
    elif nodes > 1 and model["beta_inter"] > 0:
        mine = min(mine, int(model["alpha_inter"] / model["beta_inter"]))
    return min(comm.allgather(max(mine, 0) // 8 * 8))


def _lean(Lean, st, default, shm):
    def code(algorithm):
        return algorithm_code(algorithm, default, shm)

    return Lean(st.coordinator, ReduceOp, global_process_set, st.rank, st.size, st.auto_name,
                st.outputs, MIN_BYTES, code, st.algorithm_codes, st.round16)


class SetState:
    """One set on a rank that belongs to it: its communicators, coordinator and thread, and the
    counters behind automatic tensor names (each set names its own tensors)."""

    def __init__(self, rt, set_id, ranks, comm, local, cross, autotune=False):
        from hvlite._core.coordinator import Coordinator
        from hvlite._core.lean import AutoNames, Lean   # before anything is made that must be freed
        s = rt.settings
        self.id, self.ranks = set_id, ranks
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        local_sizes = comm.allgather(local.Get_size())
        leaders = comm.allreduce(1 if local.Get_rank() == 0 else 0)
        # The coordinator gets communicators of its own: only its thread uses them (the fourth
        # carries its liveness pings, apart from every collective).
        self.comms = (comm.Dup(), local.Dup(), cross.Dup(), comm.Dup())
        self.coordinator = Coordinator(*self.comms[:3], len(set(local_sizes)) == 1, leaders,
                                       s.segment_bytes, rt.cost_model, s.cycle_time_ms / 1000.0,
                                       s.fusion_threshold, s.cache_capacity,
                                       s.stall_check_seconds, s.stall_shutdown_seconds,
                                       s.fusion_tensor_limit, s.context_args(),
                                       control=self.comms[3], ranks=tuple(ranks),
                                       lost_after=s.lost_rank_seconds,
                                       ride_bytes=_ride_bytes(comm, s, rt.cost_model, leaders,
                                                              rt.shm_info["available"]))
        if autotune:
            self.coordinator.autotune(log_path=s.autotune_log or None)
        # automatic names (apart from the set: the lean face holds them without a reference
        # cycle back to it, which would keep the coordinator and its segment alive after
        # shutdown until the garbage collector ran)
        self.auto_name = AutoNames(AUTO_MARK, AUTO_NAMES)
        # out-of-place results, reused by name; on one node from the shared output arena
        self.outputs = OutputPool(_arena_take() if self.coordinator.outputs_shared() else None)
        self.algorithm_codes = {}              # algorithm= (None: the default) -> its code
        # fp16/bf16 compression on one node rounds inside the reduction of the float32 arrays
        # (compression/cast.py); the setting is the same on every rank (init checks it)
        self.round16 = leaders == 1 and self.size > 1 and s.round16
        # the global set's commonest call in one C call (_core/lean.pyx); other sets: None
        self.lean = None if set_id != 0 else _lean(Lean, self, s.allreduce_algorithm, rt.shm_info)
        self.owned = ()                        # the set's own communicators (not the global set)
        self.thread = threading.Thread(target=self.coordinator.run, daemon=True,
                                       name=f"hvlite-coordinator-{set_id}")
        self.thread.start()

    def position(self, global_rank):
        """The set-relative rank of a global rank, or -1 when it is not in the set."""
        try:
            return self.ranks.index(global_rank)
        except ValueError:
            return -1

    def stop(self):
        """Ask the coordinator to stop; it does so once every member has asked (a collective)."""
        self.coordinator.stop()

    def join(self, finalized):
        self.thread.join()
        self.coordinator.release_all()      # every request has completed (or failed) by now
        if not finalized:
            # the liveness communicator is kept (never freed) unless it was left empty
            keep = () if self.coordinator.quiesced() else (self.comms[3],)
            for c in self.comms + self.owned:
                if c not in keep:
                    c.Free()


_DYNAMIC = ("set HVLITE_DYNAMIC_PROCESS_SETS=1 (or HOROVOD_DYNAMIC_PROCESS_SETS=1), or call "
            "hvlite.init(process_sets=\"dynamic\"), to {} process sets after init(); static sets "
            "go to init(process_sets=[...])")


def _problem(ranks, n):
    """What is wrong with a rank list for a job of n ranks, or None."""
    if not ranks:
        return "a process set needs at least one rank"
    out = [r for r in ranks if not 0 <= r < n]
    if out:
        return f"rank(s) {out} are not ranks of this job (0..{n - 1})"
    return None


@dataclasses.dataclass
class SetEntry:
    """One registered set: its ranks, this rank's SetState (None when this rank is not a
    member), and the ProcessSet objects that name it."""
    ranks: list
    state: "SetState | None"
    objects: list


class Registry:
    """The process sets of one runtime, by id; id 0 is the global set. Adding and removing are
    collective: every rank calls them, in the same order."""

    def __init__(self, rt, global_state):
        self._rt = weakref.ref(rt)
        self.entries = {0: SetEntry(global_state.ranks, global_state, [global_process_set])}
        self.next_id = 1

    @property
    def global_state(self):
        return self.entries[0].state

    def states(self):
        """This rank's SetStates (the sets it belongs to), the global set first."""
        return [self.entries[i].state for i in sorted(self.entries)
                if self.entries[i].state is not None]

    def sets(self):
        """The registered ProcessSets, by id (the global set first)."""
        return [self.entries[i].objects[0] for i in sorted(self.entries)]

    def add(self, ps, agree=None):
        """Create the set on every rank (all ranks call it, in the same order); returns it.
        `agree(obj)`: every rank's obj, in rank order; the front door passes hvlite's own
        allgather_object, which fails cleanly (ShutdownError, LostRankError, StallError) when
        a rank never arrives; the default, MPI's allgather, serves init() alone, where every
        rank is known to be there."""
        rt = self._rt()
        agree = agree or rt.comm.allgather
        if not isinstance(ps, ProcessSet):
            ps = ProcessSet(ps)
        if ps._live() is rt:
            raise InvalidArgumentError(f"{ps} is already registered")
        if rt.thread_level != rt.MPI.THREAD_MULTIPLE:
            raise InvalidArgumentError(
                f"process sets need MPI_THREAD_MULTIPLE (each set's coordinator calls MPI from its "
                f"own thread); MPI runs at {rt.thread_level_name}: set HVLITE_MPI_THREAD_LEVEL=multiple")
        ranks = ps.ranks
        mine = _problem(ranks, rt.size)
        if mine is None:
            for sid, entry in self.entries.items():
                if entry.ranks == ranks:
                    mine = f"process set {sid} already has ranks {ranks}"
        views = agree((ranks, mine))
        if any(v != ranks for v, _ in views):
            raise InvalidArgumentError(
                "add_process_set: ranks disagree on the set: " +
                ", ".join(f"rank {r}: {views[r][0]}" for r in range(rt.size)) +
                " (every rank must add the same sets in the same order)")
        problems = [f"rank {r}: {p}" for r, (_, p) in enumerate(views) if p]
        if problems:
            raise InvalidArgumentError(f"add_process_set({ranks}) failed: " + "; ".join(problems))
        set_id = self.next_id
        self.next_id += 1
        self.entries[set_id] = SetEntry(ranks, self._member_state(rt, set_id, ranks), [ps])
        ps.process_set_id = set_id
        ps._runtime = weakref.ref(rt)
        return ps

    @staticmethod
    def _member_state(rt, set_id, ranks):
        """The set's communicators and coordinator on a member rank; None elsewhere."""
        MPI = rt.MPI
        group = rt.comm.Get_group()
        sub = group.Incl(ranks)
        comm = rt.comm.Create(sub)
        sub.Free()
        group.Free()
        if comm == MPI.COMM_NULL:
            return None
        comm.Set_errhandler(MPI.ERRORS_RETURN)
        key = comm.Get_rank()
        if rt.settings.local_size:
            local = comm.Split(rt.rank // rt.settings.local_size, key)
        else:
            local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=key)
        cross = comm.Split(local.Get_rank(), key)
        state = SetState(rt, set_id, ranks, comm, local, cross)
        state.owned = (cross, local, comm)
        return state

    def remove(self, ps, agree=None):
        """Remove the set on every rank (all ranks call it, in the same order). False for the
        global set and for sets that are not registered, as in Horovod. `agree`: as add()."""
        rt = self._rt()
        agree = agree or rt.comm.allgather
        if not isinstance(ps, ProcessSet):
            raise InvalidArgumentError(f"remove_process_set needs a ProcessSet, got {ps!r}")
        set_id = ps.process_set_id if ps._live() is rt else None
        if set_id == 0 or (ps is global_process_set):
            return False
        views = agree(set_id)
        if len(set(views)) > 1:
            raise InvalidArgumentError(
                "remove_process_set: ranks disagree on the set: " +
                ", ".join(f"rank {r}: {v}" for r, v in enumerate(views)) +
                " (every rank must remove the same sets in the same order)")
        if set_id is None:
            return False
        entry = self.entries.pop(set_id)
        if entry.state is not None:
            entry.state.coordinator.wait_all()   # this rank's own work on the set finishes first
            entry.state.stop()
            entry.state.join(rt.MPI.Is_finalized())
        for obj in entry.objects:
            obj.invalidate()
        return True

    def invalidate_all(self):
        """At shutdown: every ProcessSet but the global one stops naming a set."""
        for sid, entry in self.entries.items():
            if sid:
                for obj in entry.objects:
                    obj.invalidate()

    def state_of(self, process_set, what, outsider_ok=False):
        """The SetState to run `what` on, or a clear error: not a set, removed, not a member
        (with outsider_ok, None for a set this rank is not in)."""
        if process_set is None or process_set is global_process_set:
            return self.entries[0].state
        rt = self._rt()
        if not isinstance(process_set, ProcessSet):
            raise InvalidArgumentError(f"{what}: process_set must be a hvlite.ProcessSet, "
                                       f"got {process_set!r}")
        if process_set._live() is not rt:
            raise InvalidArgumentError(
                f"{what}: process set {process_set.ranks} is not registered (it was removed, or "
                "never added with hvlite.add_process_set() or hvlite.init(process_sets=[...]))")
        state = self.entries[process_set.process_set_id].state
        if state is None and not outsider_ok:
            raise InvalidArgumentError(f"{what}: rank {rt.rank} is not part of process set "
                                       f"{process_set.process_set_id} (ranks {process_set.ranks})")
        return state


def _arena_take():
    from hvlite._core.shm.arena import shared
    return shared().take


def state_of(rt, process_set, what, outsider_ok=False):
    """rt's SetState for `process_set` (see Registry.state_of)."""
    return rt.registry.state_of(process_set, what, outsider_ok)
