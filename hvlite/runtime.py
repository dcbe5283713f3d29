"""The one Runtime object: MPI set-up, topology, the core engine, its process sets, shutdown.

hvlite keeps all of its state here; the module holds only a reference to the current runtime.
This is the state layer: it imports nothing of hvlite's above process_sets (the public init()
in hvlite/__init__.py adds what sits higher, such as the timeline).
"""
import atexit
import dataclasses
import hashlib
import os
import pkgutil
import re
import sys
import warnings
import weakref

import numpy as np

from hvlite import config as _config
from hvlite import process_sets as _ps
from hvlite.errors import (ConfigError, ForkedChildError, InvalidArgumentError, LostRankError,
                           MPILibraryError, NotInitializedError)

_LEVEL_NAMES = {"single": "MPI_THREAD_SINGLE", "funneled": "MPI_THREAD_FUNNELED",
                "serialized": "MPI_THREAD_SERIALIZED", "multiple": "MPI_THREAD_MULTIPLE"}

_current = None
lean = None         # while a runtime runs here: its global set's lean face (_core/lean.pyx)
_lost = None        # the first lost-rank message of this process: MPI cannot be used again
_inherited = None   # in a child forked from an initialized process: the parent's runtime


def _mpi(thread_level):
    """Import mpi4py.MPI, initializing MPI at `thread_level` unless something already did."""
    if "mpi4py.MPI" not in sys.modules:
        import mpi4py
        mpi4py.rc.thread_level = thread_level
    from mpi4py import MPI
    if not MPI.Is_initialized():
        MPI.Init_thread({"single": MPI.THREAD_SINGLE, "funneled": MPI.THREAD_FUNNELED,
                         "serialized": MPI.THREAD_SERIALIZED,
                         "multiple": MPI.THREAD_MULTIPLE}[thread_level])
    if MPI.Is_finalized():
        raise NotInitializedError("hvlite.init(): MPI has already been finalized in this process")
    from hvlite._core.codes import core_mpi
    started, core_lib = core_mpi()
    if not started:
        # two MPI libraries in one process: the core would call one that was never initialised
        raise MPILibraryError(
            f"hvlite's core is linked to another MPI library ({core_lib}) than the one mpi4py "
            f"loaded and started ({MPI.Get_library_version().splitlines()[0].strip()}). Rebuild "
            "hvlite against mpi4py's MPI (its mpicc first on PATH, or MPICC=), or point mpi4py at "
            "the core's library (MPI4PY_LIBMPI)")
    return MPI


class Runtime:
    """Communicators (a private duplicate of the user's, plus node-local and cross-node splits),
    the Cython engine, and the settings they were made with."""

    def __init__(self, comm, settings):
        self.settings = settings
        MPI = self.MPI = _mpi(settings.mpi_thread_level)
        from hvlite._core.engine import Engine

        base = MPI.COMM_WORLD if comm is None else comm
        self.base = base            # the user's communicator, for init()'s repeat check
        self.init_ranks = None      # init(comm=[ranks]): the list (init() then compares lists)
        self.comm = base.Dup()
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        rank = self.comm.Get_rank()
        if settings.local_size:
            self.local = self.comm.Split(rank // settings.local_size, rank)
        else:
            self.local = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        self.cross = self.comm.Split(self.local.Get_rank(), rank)
        local_sizes = self.comm.allgather(self.local.Get_size())
        leaders = self.comm.allreduce(1 if self.local.Get_rank() == 0 else 0)
        self.thread_level = MPI.Query_thread()
        s = settings
        model = s.cost_model()
        if s.probe and self.comm.Get_size() > 1:
            model = measure_cost_model(self.comm, self.local, self.cross, model)
        self.cost_model = model
        uniform = len(set(local_sizes)) == 1
        self.engine = Engine(self.comm, self.local, self.cross, uniform, leaders,
                             s.segment_bytes, model, s.context_args())
        self.shm_info = self.engine.shm_info()   # the same verdict on every rank (agreed at init)
        if s.log_level in ("trace", "debug") and rank == 0:
            log_cost_model(self.engine.cost_model(), self.comm.Get_size(), leaders,
                           self.local.Get_size(), uniform, self.shm_info["available"], s.calibrate)
        self.rank, self.size = rank, self.comm.Get_size()
        self.closed = False
        self.dynamic_sets = s.dynamic_process_sets
        state = _ps.SetState(self, 0, list(range(self.size)), self.comm, self.local,
                             self.cross, autotune=s.autotune)
        self.registry = _ps.Registry(self, state)
        self.timeline = None

    @property
    def global_state(self):
        """The global set's SetState: its coordinator, thread and automatic-name counters."""
        return self.registry.global_state

    def auto_name(self, kind):
        return self.global_state.auto_name(kind)

    @property
    def thread_level_name(self):
        MPI = self.MPI
        return {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED: "MPI_THREAD_FUNNELED",
                MPI.THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED",
                MPI.THREAD_MULTIPLE: "MPI_THREAD_MULTIPLE"}[self.thread_level]

    def close(self):
        """Stop the coordinator (a collective step: it finishes once every rank's coordinator
        has seen the stop, failing whatever is still pending), then free everything."""
        if self.timeline is not None:
            try:
                self.timeline.stop()
            except OSError as e:        # shutdown goes on: the trace is cut short, and said so
                print(f"hvlite: warning: {e.strerror}", file=sys.stderr, flush=True)
            self.timeline = None
        global _lost
        self.closed = True
        states = self.registry.states()
        lost = self._lost_message(states)
        if lost and _lost is None:
            _lost = lost
        for state in states:        # device collectives' workers first: they submit to the sets
            worker = getattr(state, "_gpu_worker", None)
            if worker is not None:
                worker.stop()
                worker.thread.join()
        for state in states:        # every set's stop is under way before any is waited for
            state.stop()
        # after a lost rank nothing is freed: MPI calls on its communicators may never return
        finalized = self.MPI.Is_finalized() or lost is not None
        for state in states:
            state.join(finalized)
        self.registry.invalidate_all()
        self.engine.close()
        if not finalized:
            gpu_comm = getattr(self, "_gpu_comm", None)
            for c in ((gpu_comm,) if gpu_comm is not None else ()) + (self.cross, self.local, self.comm):
                c.Free()


    @staticmethod
    def _lost_message(states):
        from hvlite._core.codes import ERROR_KINDS
        for state in states:
            death = state.coordinator.death()
            if death and ERROR_KINDS[death[0]] in ("lost", "failed"):
                return death[1]
        return None


def measure_cost_model(comm, local, cross, defaults):
    """The cost model's figures, measured (well under a second): one-way message time for 8 B and
    1 MiB between neighbouring ranks within a node and, between local ranks 0, across nodes; the
    reduction and copy rates.
    Every rank ends with the same figures (the slowest pair's), so "auto" chooses alike."""
    import numpy as np
    from mpi4py import MPI
    from hvlite._core.tuning.probes import pingpong, reduce_seconds_per_byte, copy_seconds_per_byte

    def pair(c):
        r, n = c.Get_rank(), c.Get_size()
        partner = r ^ 1
        if partner >= n:
            return 0.0, 0.0
        small = pingpong(c, partner, 8, 30)
        large = pingpong(c, partner, 1 << 20, 9)
        return small, max(large - small, 1e-12) / (1 << 20)

    a_in, b_in = pair(local)
    # the model's beta_inter is one node's link (cost_model.pyx): one pair per pair of nodes
    # crosses, the local ranks 0, alone on the link
    a_x, b_x = pair(cross) if local.Get_rank() == 0 else (0.0, 0.0)
    mine = np.array([a_in, b_in, a_x, b_x, reduce_seconds_per_byte(reps=5),
                     copy_seconds_per_byte(reps=5)])
    worst = np.empty_like(mine)
    comm.Allreduce(mine, worst, op=MPI.MAX)
    model = dict(defaults)
    for key, value in zip(("alpha_intra", "beta_intra", "alpha_inter", "beta_inter", "gamma",
                           "beta_mem"), worst):
        if value > 0:
            model[key] = float(value)
    return model


def log_cost_model(model, n, nodes, local_size, uniform, shm=False, calibrate=True):
    from hvlite._core.tuning.cost_model import crossovers
    m = model
    print(f"hvlite: cost model: within a node alpha {m['alpha_intra'] * 1e6:.2f} us, "
          f"{1 / m['beta_intra'] / 1e9:.2f} GB/s; across nodes alpha {m['alpha_inter'] * 1e6:.2f} us, "
          f"{1 / m['beta_inter'] / 1e9:.2f} GB/s; reduce {1 / m['gamma'] / 1e9:.2f} GB/s; "
          f"shm barrier {m['alpha_shm'] * 1e6:.2f} us, copy {1 / m['beta_mem'] / 1e9:.2f} GB/s\n"
          f"hvlite: auto on {n} ranks, {nodes} node(s), by the model: "
          f"{real_names(crossovers(n, model, nodes, local_size, uniform, shm), nodes)}; "
          + ("each size class tries its candidates on its first calls" if calibrate
             else "no trials (HVLITE_CALIBRATE=0)"),
          file=sys.stderr, flush=True)


def real_names(text, nodes):
    """Algorithm names as what runs: across nodes `shm` is the shared segment within each node
    and a flat algorithm between them."""
    return re.sub(r"\bshm\b", "hierarchical over shm", text) if nodes > 1 else text


def build_identity():
    """hvlite's version and a hash of the core's module names: ranks running different builds
    would misread each other's messages, so init() compares this too."""
    import hvlite._core as core
    names = sorted(m.name for m in pkgutil.walk_packages(core.__path__, onerror=lambda _: None))
    return f"{_config.VERSION}+{hashlib.sha1(' '.join(names).encode()).hexdigest()[:12]}"


def _set_ranks(process_sets):
    """The static process sets as rank lists (what init() compares and remembers); a set made
    from a communicator and not yet resolved is ["comm", k] (its k-th such entry)."""
    out, k = [], 0
    for p in process_sets or ():
        p = p if isinstance(p, _ps.ProcessSet) else _ps.ProcessSet(p)
        if p.ranks is None and p.mpi_comm is not None:
            out.append(["comm", k])
            k += 1
        else:
            out.append(list(p.ranks))
    return out


def _comm_members(process_sets, base, MPI):
    """For each set made from a communicator, in order: the ranks (of `base`) of this rank's
    communicator, [] for MPI's COMM_NULL. Local: init()'s one allgather shares them."""
    out = []
    for p in process_sets or ():
        if not (isinstance(p, _ps.ProcessSet) and p.ranks is None and p.mpi_comm is not None):
            continue
        c = p.mpi_comm
        if c == MPI.COMM_NULL:
            out.append([])
            continue
        group, whole = c.Get_group(), base.Get_group()
        try:
            ranks = MPI.Group.Translate_ranks(group, list(range(c.Get_size())), whole)
        finally:
            group.Free()
            whole.Free()
        if any(r == MPI.UNDEFINED for r in ranks):
            raise InvalidArgumentError(f"{_SETS_KEY}: a communicator holds processes outside "
                                       "hvlite's communicator")
        out.append(sorted(int(r) for r in ranks))
    return out


def _expand(process_sets, sets, members, everyone):
    """The static sets with each communicator entry replaced by every distinct group the ranks'
    communicators hold (in the order of the lowest rank holding it): (ProcessSet objects to
    register, their rank lists). This rank's own group is the user's object."""
    objects, lists, k = [], [], 0
    for p, ranks in zip(process_sets or (), sets):
        if ranks[:1] != ["comm"]:
            objects.append(p)
            lists.append(ranks)
            continue
        groups = []
        for theirs in everyone:
            if theirs[k] and theirs[k] not in groups:
                groups.append(theirs[k])
        for g in groups:
            if g == members[k]:
                p.ranks = list(g)
                objects.append(p)
            else:
                objects.append(_ps.ProcessSet(g))
            lists.append(list(g))
        k += 1
    return objects, lists


_SETS_KEY = "init(process_sets=...)"


def _read_arguments(process_sets):
    """This rank's settings and static process sets: (settings, sets, problem), where problem
    is None or (the exception class to raise, its text)."""
    try:
        settings = _config.load()
    except ConfigError as e:
        return None, [], (ConfigError, str(e))
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":       # (Horovod's compare)
            return settings, [], (InvalidArgumentError, f"init(process_sets={process_sets!r}): "
                                  "use a list of process sets or \"dynamic\"")
        return dataclasses.replace(settings, dynamic_process_sets=True), [], None
    try:
        return settings, _set_ranks(process_sets), None
    except Exception as e:      # noqa: BLE001 - any bad entry fails every rank alike
        return settings, [], (InvalidArgumentError, f"{_SETS_KEY}: {e}")


def _agree(base, MPI, settings, sets, problem, members=()):
    """The one agreement step of init(): a single allgather on the user's communicator, before
    anything else is set up, of this rank's problem (or None) and the values every rank must
    share. When any rank failed or any value differs, every rank raises: ConfigError for
    settings, InvalidArgumentError when only init()'s process_sets argument is at fault.
    Returns every rank's `members` (sets made from communicators: _comm_members)."""
    mine = None
    if problem is None:
        mine = dict(_config.agreed_values(settings))
        levels = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
                  MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}
        mine["MPI thread level provided (MPI_Query_thread)"] = levels.get(MPI.Query_thread())
        mine[_SETS_KEY] = sets
        mine["hvlite build (version+core modules)"] = build_identity()
    kind = problem[0].__name__ if problem else None
    everyone = base.allgather((kind, problem and problem[1], mine, list(members)))
    failed = [(r, k, text) for r, (k, text, _, _) in enumerate(everyone) if k is not None]
    if failed:
        cls = ConfigError if any(k == "ConfigError" for _, k, _ in failed) else InvalidArgumentError
        lines = "; ".join(f"rank {r}: {text}" for r, _, text in failed)
        raise cls(f"hvlite.init() failed on rank(s) {[r for r, _, _ in failed]}: {lines}")
    differ = _config.disagreements([m for _, _, m, _ in everyone])
    if differ:
        only_sets = len(differ) == 1 and differ[0].startswith(_SETS_KEY)
        raise (InvalidArgumentError if only_sets else ConfigError)(
            "hvlite.init(): ranks disagree on settings that must be the same everywhere: " +
            "; ".join(differ))
    return [m for _, _, _, m in everyone]


def _same_comm(a, b):
    try:
        return a is b or bool(a == b)      # mpi4py compares the handles
    except Exception:           # noqa: BLE001 - not a communicator: not the same one
        return False


def _rank_list(comm):
    """init(comm=[ranks]) as in Horovod: ranks of COMM_WORLD, in the new communicator's order.
    Returns the list ([] for an empty one: COMM_WORLD), or None where comm is a communicator or
    None. Checked here, on each rank alone and before any collective: a list that is not a set
    of world ranks holding this rank would leave MPI's group calls erroneous or waiting."""
    if comm is None or _ps._is_comm(comm) or isinstance(comm, (str, bytes)) or \
            not hasattr(comm, "__iter__"):
        return None
    ranks = list(comm)
    bad = [r for r in ranks if not isinstance(r, (int, np.integer)) or isinstance(r, bool)]
    if bad:
        raise InvalidArgumentError(f"init(comm={ranks!r}): ranks must be integers, got {bad!r}")
    ranks = [int(r) for r in ranks]
    if not ranks:
        return ranks
    from mpi4py import MPI
    world, me = MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()
    outside = [r for r in ranks if not 0 <= r < world]
    if outside:
        raise InvalidArgumentError(f"init(comm={ranks}): ranks {outside} are not ranks of "
                                   f"MPI_COMM_WORLD (size {world})")
    dups = sorted({r for r in ranks if ranks.count(r) > 1})
    if dups:
        raise InvalidArgumentError(f"init(comm={ranks}): ranks {dups} appear more than once")
    if me not in ranks:
        raise InvalidArgumentError(f"init(comm={ranks}): this process (rank {me} of "
                                   "MPI_COMM_WORLD) is not in the list; each rank passes the "
                                   "list of ranks it runs with")
    return ranks


def _comm_of_ranks(ranks, MPI):
    """A communicator of COMM_WORLD's `ranks` (collective over them only, as Horovod's
    MPI_Comm_create_group: ranks outside the list may do something else meanwhile)."""
    world = MPI.COMM_WORLD.Get_group()
    group = world.Incl(ranks)
    try:
        return MPI.COMM_WORLD.Create_group(group)
    finally:
        group.Free()
        world.Free()


def _check_repeat(rt, comm, process_sets):
    """init() while initialized: idempotent for the same (or omitted) arguments, an error for
    different ones, which would otherwise be silently ignored."""
    ranks = _rank_list(comm)
    if ranks is not None:
        if (ranks or None) != rt.init_ranks:
            raise InvalidArgumentError(f"init(comm={ranks}): hvlite is already initialized on "
                                       f"{rt.init_ranks or 'MPI_COMM_WORLD'}; call shutdown() "
                                       "first")
    elif comm is not None and not _same_comm(comm, rt.base):
        raise InvalidArgumentError("init(comm=...): hvlite is already initialized on another "
                                   "communicator; call shutdown() first")
    if process_sets is None:
        return
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":       # (Horovod's compare)
            raise InvalidArgumentError(f"init(process_sets={process_sets!r}): use a list of "
                                       "process sets or \"dynamic\"")
        if not rt.dynamic_sets:
            raise InvalidArgumentError("init(process_sets=\"dynamic\"): hvlite is already "
                                       "initialized without dynamic process sets; call "
                                       "shutdown() first")
        return
    try:
        wanted = _set_ranks(process_sets)
    except Exception as e:      # noqa: BLE001
        raise InvalidArgumentError(f"init(process_sets=...): {e}") from None
    if any(w[:1] == ["comm"] for w in wanted):       # not resolved: new objects, another call
        raise InvalidArgumentError("init(process_sets=...): hvlite is already initialized; "
                                   "sets made from communicators are made by the first init()")
    if wanted != rt.static_sets:
        raise InvalidArgumentError(f"init(process_sets={wanted}): hvlite is already initialized "
                                   f"with process sets {rt.static_sets}; call shutdown() first")


def init(comm=None, process_sets=None):
    """Start hvlite's state on `comm`: an mpi4py communicator (COMM_WORLD by default) or, as in
    Horovod, a list of COMM_WORLD's ranks, each of which calls init() with the same list.
    Idempotent: a repeated call with the same arguments (or none) returns the running state; one
    with another communicator or other process sets raises InvalidArgumentError.
    `process_sets`: ProcessSets (or rank lists) to create now, the same on every
    rank, or "dynamic" to allow add/remove_process_set later (as HVLITE_DYNAMIC_PROCESS_SETS=1
    does). Settings are read, then compared across ranks in one collective: a bad value on any
    rank, or a shared setting that differs, raises ConfigError on every rank."""
    if _current is not None:
        _check_repeat(_current, comm, process_sets)
        return _current
    if _inherited is not None:
        raise _forked("hvlite.init()")
    if _lost is not None:
        raise LostRankError(f"hvlite.init(): MPI cannot be used again in this process after a "
                            f"lost rank ({_lost})")
    if process_sets is not None and not isinstance(process_sets, str) and hasattr(
            process_sets, "__iter__"):      # read twice below; a bare communicator: its set
        process_sets = [_ps.ProcessSet(p) if _ps._is_comm(p) else p for p in process_sets]
    settings, sets, problem = _read_arguments(process_sets)
    MPI = _mpi((settings or _config.Settings()).mpi_thread_level)
    ranks = _rank_list(comm)
    if ranks is not None:       # ([]: COMM_WORLD)
        ranks = ranks or None
        comm = made = _comm_of_ranks(ranks, MPI) if ranks else None
    try:
        return _start(comm, process_sets, settings, sets, problem, MPI, ranks)
    finally:
        if ranks:               # the runtime holds its own duplicate
            made.Free()


def _start(comm, process_sets, settings, sets, problem, MPI, ranks):
    global _current, lean
    base = MPI.COMM_WORLD if comm is None else comm
    members = []
    if problem is None:
        try:
            members = _comm_members(process_sets if not isinstance(process_sets, str) else (),
                                    base, MPI)
        except Exception as e:      # noqa: BLE001 - told to every rank by the agreement
            problem = (InvalidArgumentError, f"{_SETS_KEY}: {e}")
    everyone = _agree(base, MPI, settings, sets, problem, members)
    static, sets = _expand(process_sets if not isinstance(process_sets, str) else (), sets,
                           members, everyone)
    if base.Get_rank() == 0:
        for name, close in _config.unknown_variables():
            hint = f"; did you mean {close}?" if close else ""
            warnings.warn(f"hvlite: {name} is set but hvlite does not read it{hint}",
                          stacklevel=4)
        for name, why in _config.ignored_horovod_variables():
            warnings.warn(f"hvlite: {name} is Horovod's and means nothing here: {why}",
                          stacklevel=4)
    _current = rt = Runtime(comm, settings)
    rt.pid = os.getpid()
    if ranks:                   # the communicator made from them is freed: init() compares lists
        rt.base, rt.init_ranks = None, ranks
    rt.static_sets = sets
    _ps.global_process_set.ranks = list(range(rt.size))
    _ps.global_process_set._runtime = weakref.ref(rt)
    try:
        for p in static or ():
            rt.registry.add(p)
    except BaseException:       # every rank fails alike: none is left half-initialized
        shutdown()
        raise
    lean = rt.global_state.lean
    _mark_state(rt, "running")
    return _current


def shutdown():
    """Release hvlite's communicators and buffers. Safe to call twice, and called at exit."""
    global _current, lean
    rt, _current, lean = _current, None, None
    if rt is not None:
        rt.close()
        _mark_state(rt, "stopped")


def _mark_state(rt, state):
    """Under hvliterun's supervision, tell it whether hvlite runs in this rank: a rank that exits
    with status 0 while "running" (os._exit, no shutdown) is a failure of the job."""
    directory = os.environ.get("HVLITE_RUN_STATUS_DIR")
    if not directory or not os.path.isdir(directory):
        return
    try:
        path = os.path.join(directory, f"hvlite-{rt.MPI.COMM_WORLD.Get_rank()}.state")
        with open(path + ".tmp", "w") as f:
            f.write(state)
        os.replace(path + ".tmp", path)
    except Exception:   # noqa: BLE001 - a courtesy to the launcher, never a reason to fail
        pass


def add_process_set(process_set, agree=None):
    """Create a process set from a ProcessSet or a list of ranks and return the ProcessSet.
    Every rank calls it, in the same order; needs dynamic process sets. `agree`: see
    Registry.add (hvlite.add_process_set passes its own allgather_object)."""
    rt = current()
    if not rt.dynamic_sets:
        raise InvalidArgumentError("add_process_set: " + _ps._DYNAMIC.format("add"))
    return rt.registry.add(process_set, agree)


def remove_process_set(process_set, agree=None):
    """Remove a process set on every rank (all call it, in the same order); returns whether it
    was removed. The global set is never removed (False), as in Horovod."""
    rt = current()
    if process_set is _ps.global_process_set or getattr(process_set, "process_set_id", None) in (
            0, None):
        return False        # the global set, or one never registered: Horovod's False
    if not rt.dynamic_sets:
        raise InvalidArgumentError("remove_process_set: " + _ps._DYNAMIC.format("remove"))
    return rt.registry.remove(process_set, agree)


def registered_sets():
    """The registered ProcessSets, by id (the global set first)."""
    return current().registry.sets()


def current():
    if _current is None:
        if _inherited is not None:
            raise _forked("this call")
        raise NotInitializedError("hvlite has not been initialized; call hvlite.init() first")
    return _current


def identity():
    """The runtime for questions that need no communication (rank, size, ...): the current one,
    or in a forked child the parent's, whose answers the child inherited (a DataLoader worker
    may shard by hvlite.rank(), as under Horovod)."""
    if _current is None and _inherited is not None:
        return _inherited
    return current()


def _forked(what):
    return ForkedChildError(
        f"{what}: hvlite was initialized in process {_inherited.pid}; this process is a child "
        f"forked from it (pid {os.getpid()}), and a forked child cannot use its parent's runtime "
        "(its MPI connections, shared segment and coordinator belong to the parent's job). "
        "Communicate from the parent, or start the child with the 'spawn' method and a job of "
        "its own")


def _after_fork_in_child():
    """os.register_at_fork: a child of an initialized process keeps the parent's runtime for
    good (its finalizers would free the parent's shared segment and communicators), refuses
    every call that would communicate, and ends without MPI_Finalize, whose PMI barrier on the
    inherited connection would break the parent's own finalize."""
    global _current, _inherited, lean
    if _current is None:
        return
    _inherited, _current, lean = _current, None, None
    _KEPT.append(_inherited)
    code = [0]
    real_exit, real_hook = sys.exit, sys.excepthook

    def exit_(status=None):
        code[0] = status if isinstance(status, int) else (0 if status is None else 1)
        real_exit(status)

    def hook(*args):
        code[0] = 1
        real_hook(*args)

    def leave():            # registered last, so it runs first of the exit handlers
        if "logging" in sys.modules:
            sys.modules["logging"].shutdown()
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:   # noqa: BLE001 - a closed stream: nothing left to flush
                pass
        os._exit(code[0])
    sys.exit, sys.excepthook = exit_, hook
    atexit.register(leave)


_KEPT = []
os.register_at_fork(after_in_child=_after_fork_in_child)


def is_initialized():
    return _current is not None


def _at_exit():
    """shutdown(); after a lost rank, end the process here with status 1: MPI_Finalize would
    wait for the lost rank for ever (the launcher then ends the other ranks)."""
    shutdown()
    if _lost is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


atexit.register(_at_exit)
