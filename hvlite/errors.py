"""The exception tree. Each class also derives from the built-in a caller would catch, as
Horovod's callers and its own tests do: argument errors are ValueError (or TypeError for a
dtype), an operation hvlite does not offer is NotImplementedError (a RuntimeError), and a
collective the runtime could not complete (a lost rank, MPI, a stall, a shutdown) is an
InternalError, Horovod's HorovodInternalError (a RuntimeError)."""


class HvliteError(Exception):
    """Root of every error hvlite raises."""


class NotInitializedError(HvliteError, ValueError):
    """An hvlite call before hvlite.init() (or after shutdown())."""


class ConfigError(HvliteError, ValueError):
    """A setting (environment variable or argument) with a value hvlite does not accept."""


class DtypeError(HvliteError, TypeError):
    """A tensor whose dtype the core cannot reduce."""


class InvalidArgumentError(HvliteError, ValueError):
    """A bad argument: unknown op or algorithm, read-only output, and the like."""


class DuplicateNameError(InvalidArgumentError):
    """A collective submitted under a name that is still in flight on this rank, its handle
    held or dropped (Horovod's rule: raised at once, never waited for, since finishing the
    earlier request may need a peer that is itself waiting for this rank)."""


class UnsupportedOperationError(HvliteError, NotImplementedError):
    """A valid op or setting that this collective does not offer (Adasum in a reducescatter,
    say); Horovod raises NotImplementedError there, a RuntimeError."""


class InternalError(HvliteError, RuntimeError):
    """A collective the runtime could not complete for a reason outside the caller's arguments.
    Horovod's HorovodInternalError (hvlite.torch and hvlite.elastic export it under that name),
    the error elastic training recovers from."""


class ForkedChildError(HvliteError, RuntimeError):
    """A call in a process forked from one where hvlite was initialized: the child shares its
    parent's MPI connections, shared segment and coordinator memory but none of its threads,
    so using them would corrupt the parent's job."""


class MismatchError(HvliteError, RuntimeError):
    """Ranks called the same collective with different shapes, dtypes, ops or algorithms,
    or some rank failed its own input checks. Raised on every rank."""


class MPILibraryError(HvliteError, ImportError):
    """init() found the core linked to another MPI library than the one mpi4py loaded and
    started (two MPIs in one process): an installation problem, an ImportError as a broken
    extension is at import."""


class ShutdownError(InternalError):
    """hvlite was shut down (on this or another rank) before the collective completed,
    or a call came after the coordinator stopped."""


class StallError(InternalError):
    """Some ranks never submitted a collective within HVLITE_STALL_SHUTDOWN_TIME_SECONDS."""


class LostRankError(InternalError):
    """A rank stopped answering while this one waited on it (killed, stopped, or exited without
    shutdown()). Names the rank and the collective in flight; MPI cannot go on without it, so
    every later call raises this too and the process skips MPI_Finalize at exit (status 1)."""

    def __init__(self, message, rank=None):
        super().__init__(message)
        self.rank = rank


class MPIError(InternalError):
    """An error code from MPI (or the core below it), with MPI's own message."""

    def __init__(self, code, message):
        super().__init__(f"MPI error {code}: {message}")
        self.code = code
        self.mpi_message = message


class RankFailedError(LostRankError):
    """A rank failed on its own in the middle of a collective (out of memory for a fused batch,
    a joined rank's buffer, a result): raised on that rank and, naming it and its reason, on
    every rank of the set, whose collective cannot complete without it. As after a lost rank,
    MPI cannot go on."""


class PSError(InternalError):
    """A parameter-server peer failed (a worker raised, a server died) or stopped answering.
    Raised on every rank of the job, naming the rank that failed first."""


class HostsUpdatedInterrupt(HvliteError, RuntimeError):
    """hvliterun --elastic found more slots (host discovery): raised by `State.commit()` on
    every rank at once, after the commit is durable, so the job can stop there and be relaunched
    larger. Horovod's name; `skip_sync` is kept for its signature (a relaunch always syncs)."""

    def __init__(self, skip_sync=False, message=None):
        super().__init__(message or "hosts were added; the job stops at this commit and is "
                                    "relaunched on more ranks")
        self.skip_sync = skip_sync
