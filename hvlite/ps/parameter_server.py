"""The ParameterServer object: one per rank, a server or a worker role, and the job-wide
checks and failure handling around them (see hvlite.ps for the user's view)."""
import pickle
import sys
import time

from hvlite import config, runtime
from hvlite.errors import ConfigError, InvalidArgumentError, MismatchError, PSError
from hvlite.ps.layout import Layout
from hvlite.ps.protocol import MODES

ABORT_GRACE_SECONDS = 1.5    # time the other ranks get to print their error before MPI_Abort


def check_settings(mode, staleness, servers, size):
    """Named errors for settings no job can run with (every rank raises the same one)."""
    if mode not in MODES:
        raise ConfigError(f"hvlite.ps: unknown mode {mode!r}; accepted: {', '.join(MODES)}")
    if mode == "ssp":
        if staleness is None:
            raise ConfigError("hvlite.ps: mode='ssp' needs staleness=k (an integer >= 0)")
        if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
            raise ConfigError(f"hvlite.ps: staleness must be an integer >= 0, got {staleness!r}")
    elif staleness not in (None, 0):
        raise ConfigError(f"hvlite.ps: staleness={staleness!r} applies to mode='ssp' only "
                          f"(mode={mode!r})")
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise ConfigError(f"hvlite.ps: servers must be a positive integer, got {servers!r}")
    if servers >= size:
        raise ConfigError(f"hvlite.ps: {servers} server(s) on {size} rank(s) leaves no worker; "
                          "servers must be fewer than ranks")


def check_optimizer(optimizer):
    from hvlite.optim.optimizers import LAMB, LARS, Optimizer
    if not isinstance(optimizer, Optimizer):
        raise InvalidArgumentError(f"hvlite.ps: optimizer must be an hvlite.optim optimizer "
                                   f"(SGD, Adam), got {type(optimizer).__name__}")
    if isinstance(optimizer, (LARS, LAMB)):
        raise InvalidArgumentError(f"hvlite.ps: {type(optimizer).__name__} scales by whole-layer "
                                   "norms, which a server holding a shard cannot compute; use "
                                   "SGD or Adam")


class ParameterServer:
    """This rank's part of a parameter-server job (a server or a worker)."""

    def __init__(self, params, optimizer, mode="sync", staleness=None, servers=None, comm=None,
                 timeout=None):
        settings = config.load()
        MPI = runtime._mpi(settings.mpi_thread_level)
        if comm is None:
            comm = runtime.current().comm if runtime.is_initialized() else MPI.COMM_WORLD
        size, rank = comm.Get_size(), comm.Get_rank()
        servers = servers if servers is not None else (settings.ps_servers or 1)
        check_settings(mode, staleness, servers, size)
        check_optimizer(optimizer)
        self.layout = Layout(params, servers)
        self.mode, self.staleness = mode, (staleness or 0) if mode == "ssp" else (0 if mode == "sync" else None)
        self.size, self.rank, self.num_servers = size, rank, servers
        self.num_workers = size - servers
        self.server_ranks = list(range(self.num_workers, size))
        self.is_server = rank >= self.num_workers
        self.is_worker = not self.is_server
        self.params = params
        self._stats = None
        self._closed = False
        from hvlite._core.ps import Link
        self.comm = comm.Dup()
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        self.link = Link(self.comm, settings.ps_timeout if timeout is None else float(timeout))
        self._agree()
        self._install_hook()
        if self.is_server:
            from hvlite.ps.server import Server
            index = rank - self.num_workers
            self.role = Server(self.link, self.layout, index, rank, optimizer, mode,
                               self.staleness or 0, self.num_workers, self.server_ranks)
            self.role.receive_init()
        else:
            from hvlite.ps.worker import Worker
            self.role = Worker(self.link, self.layout, rank, params, self.server_ranks)
            if rank == 0:
                self.role.send_init()

    def _agree(self):
        """Every rank must run the same mode, bound, servers and parameters: else name who differs."""
        mine = (self.mode, self.staleness, self.num_servers, self.layout.describe())
        allv = [pickle.loads(b) for b in self.link.allgather_bytes(pickle.dumps(mine))]
        differ = [r for r, v in enumerate(allv) if v != allv[0]]
        if differ:
            self.comm.Free()
            raise MismatchError(f"hvlite.ps: ranks {differ} set up differently from rank 0 "
                                f"(mode, staleness, servers, parameters): rank 0 has "
                                f"{allv[0][:3]}, rank {differ[0]} has {allv[differ[0]][:3]}"
                                + ("" if allv[0][3] == allv[differ[0]][3] else
                                   "; their parameter names/shapes/dtypes differ"))

    # -- workers ------------------------------------------------------------------------------
    def pull(self):
        """The current parameters, into this worker's own arrays (returned as the dict)."""
        self._need("worker", "pull")
        return self.role.pull()

    def push(self, grads):
        """Send {name: gradient} for every parameter; returns once the sends are started."""
        self._need("worker", "push")
        self.role.push(grads)

    # -- servers ------------------------------------------------------------------------------
    def serve(self):
        """Apply pushes and answer pulls until every worker has closed; then the final exchange."""
        self._need("server", "serve")
        self.role.serve()
        return self._finish()

    def close(self):
        """Workers: let in-flight pushes land, tell the servers, wait for the final exchange
        (statistics to every rank, final parameters to every worker)."""
        if self._closed:
            return self._stats
        if self.is_server:
            return self.serve()
        self.role.done()
        return self._finish()

    def _finish(self):
        mine = {"stats": self.role.final(), "shard": getattr(self.role, "shard", None)}
        every = [pickle.loads(b) for b in self.link.allgather_bytes(pickle.dumps(mine))]
        if self.is_worker:
            import numpy as np
            flat = np.concatenate([every[r]["shard"] for r in self.server_ranks])
            self.layout.unpack(flat, self.params)
        self._stats = merge_stats([e["stats"] for e in every], self.mode, self.staleness)
        self._closed = True
        self._remove_hook()
        self.comm.Free()
        return self._stats

    def stats(self):
        """After close()/serve(): the whole job's figures, the same on every rank."""
        if self._stats is None:
            raise InvalidArgumentError("hvlite.ps: stats() are gathered by close() (workers) and "
                                       "serve() (servers); call it after those")
        return self._stats

    def abort(self, reason):
        """Fail the whole job from code that caught its own exception."""
        self._fail(str(reason))

    def _need(self, role, what):
        if self._closed:
            raise InvalidArgumentError(f"hvlite.ps: {what}() after close()")
        if (role == "server") != self.is_server:
            raise InvalidArgumentError(f"hvlite.ps: {what}() is for {role}s; rank {self.rank} is a "
                                       f"{'server' if self.is_server else 'worker'}")

    # -- failure: one rank's error ends every rank -----------------------------------------------
    def _install_hook(self):
        self._prev_hook = sys.excepthook

        def hook(etype, value, tb):
            self._prev_hook(etype, value, tb)
            remote = isinstance(value, PSError) and getattr(value, "remote", False)
            self._fail(None if remote else f"{'server' if self.is_server else 'worker'} rank "
                       f"{self.rank} failed: {etype.__name__}: {value}")
        sys.excepthook = hook

    def _remove_hook(self):
        if getattr(self, "_prev_hook", None) is not None:
            sys.excepthook = self._prev_hook
            self._prev_hook = None

    def _fail(self, text):
        """Tell the peers (unless they told us), give them a moment to print, end the job."""
        if text is not None:
            try:
                self.role.abort(text if text.startswith("hvlite.ps") else f"hvlite.ps: {text}")
            except Exception:
                pass
        print(f"hvlite.ps: rank {self.rank} ends the job", file=sys.stderr, flush=True)
        time.sleep(ABORT_GRACE_SECONDS)     # every rank, so none ends the job before the rest print
        self.comm.Abort(1)


def init(params, optimizer, mode="sync", staleness=None, servers=None, comm=None, timeout=None):
    """Set up a parameter-server job on every rank (collective); see the module docstring."""
    return ParameterServer(params, optimizer, mode, staleness, servers, comm, timeout)


def merge_stats(per_rank, mode, staleness):
    servers = [s for s in per_rank if s["role"] == "server"]
    workers = [s for s in per_rank if s["role"] == "worker"]
    hist = {}
    for s in servers:
        for k, v in s["staleness"].items():
            hist[k] = hist.get(k, 0) + v
    return {"mode": mode, "staleness_bound": staleness, "servers": len(servers),
            "workers": len(workers), "staleness": dict(sorted(hist.items())),
            "max_staleness": max(hist) if hist else 0,
            "pushes": sum(s["pushes"] for s in servers), "updates": [s["updates"] for s in servers],
            "steps": [w["steps"] for w in workers],
            "pull_wait_s": [round(w["pull_wait_s"], 4) for w in workers],
            "per_rank": per_rank}
