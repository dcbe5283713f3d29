"""Every setting, typed and validated, read once from the environment at init().

A bad value is an error that names the variable and what it accepts; nothing is silently ignored.
Horovod's variables with the same meaning are accepted too (HOROVOD_FUSION_THRESHOLD, ...), so a
Horovod job's settings carry over; where both are set, the HVLITE_ one wins.
"""
import dataclasses
import os

from hvlite._core.codes import ALGORITHMS      # the table in _core/codes.h (starts no MPI)
from hvlite.errors import ConfigError

THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")
LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")


@dataclasses.dataclass(frozen=True)
class Settings:
    allreduce_algorithm: str = "auto"
    # Only one thread calls MPI at a time in hvlite's design, so SERIALIZED is enough; MPICH
    # switches its shared-memory collectives off at MULTIPLE. Ask for multiple if your own code
    # calls MPI from several threads at once.
    mpi_thread_level: str = "multiple"
    local_size: int = 0            # 0: nodes from MPI_COMM_TYPE_SHARED; K: pretend nodes of K ranks
    segment_bytes: int = 256 << 10  # receive segment for the reduce steps (two are kept)
    check_agreement: bool = True   # metadata check in Engine.allreduce (benchmarks' direct path)
    cycle_time_ms: float = 1.0     # least time between rounds while work stays pending
    fusion_threshold: int = 64 << 20  # bytes per fused all-reduce; 0 turns fusion off
    fusion_tensor_limit: int = 256 << 10  # tensors at least this large are reduced alone
    cache_capacity: int = 1024     # response-cache slots; 0 turns the cache off
    stall_check_seconds: float = 60.0     # 0 turns the stall check off
    stall_shutdown_seconds: float = 0.0   # > 0: a stall this long fails every rank
    timeline: str = ""             # write a Chrome trace here from init() on
    timeline_mark_cycles: bool = False
    timeline_all_ranks: bool = False  # one file per rank (rank r: <name>.rank<r><ext>)
    log_level: str = "warning"     # debug shows the measured cost model and crossovers
    probe: bool = True             # measure alpha, beta, gamma at init() for algorithm="auto"
    autotune: bool = False         # tune fusion threshold and cycle time over the first steps
    autotune_log: str = ""         # CSV of every autotune trial (rank 0)
    dynamic_process_sets: bool = False  # allow add/remove_process_set after init()
    ps_servers: int = 0            # hvlite.ps: server ranks (0: the argument, else 1)
    ps_timeout: float = 300.0      # hvlite.ps: seconds a rank waits for a peer; 0 waits forever
    alpha_intra: float = 2e-6      # cost model: seconds per message within a node
    beta_intra: float = 1 / 4e9    #   seconds per byte within a node
    alpha_inter: float = 10e-6     #   seconds per message between nodes
    beta_inter: float = 1 / 1.2e9  #   seconds per byte between nodes
    gamma: float = 1 / 6e9         #   seconds per byte reduced
    alpha_shm: float = 1e-6        #   seconds per flag barrier in the shared segment
    beta_mem: float = 1 / 10e9     #   seconds per byte copied (measured at init with the probe)
    shm: bool = True               # map a shared segment per node (algorithm "shm", hierarchical)
    shm_segment_bytes: int = 1 << 20   # per-rank slot; large buffers go through in segments
    shm_redundant_bytes: int = -1      # up to this many bytes every rank reduces all slots (one
                                       # barrier) instead of a slice (two); -1: 256 KiB on nodes
                                       # of 2 ranks, 16 KiB on larger ones (measured)
    cuda_aware: str = "auto"       # device arrays straight to MPI: "auto" asks the library
    cuda_chunk_bytes: int = 4 << 20  # host staging: bytes per chunk (two pinned slots)

    def cost_model(self):
        return {"alpha_intra": self.alpha_intra, "beta_intra": self.beta_intra,
                "alpha_inter": self.alpha_inter, "beta_inter": self.beta_inter,
                "gamma": self.gamma, "alpha_shm": self.alpha_shm, "beta_mem": self.beta_mem}

    def shm_args(self):
        return (self.shm, self.shm_segment_bytes, self.shm_redundant_bytes, self.probe)


# hvlite name -> Horovod's name for the same setting
ALIASES = {
    "HVLITE_FUSION_THRESHOLD": "HOROVOD_FUSION_THRESHOLD",
    "HVLITE_CYCLE_TIME": "HOROVOD_CYCLE_TIME",
    "HVLITE_CACHE_CAPACITY": "HOROVOD_CACHE_CAPACITY",
    "HVLITE_STALL_CHECK_TIME_SECONDS": "HOROVOD_STALL_CHECK_TIME_SECONDS",
    "HVLITE_STALL_SHUTDOWN_TIME_SECONDS": "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
    "HVLITE_TIMELINE": "HOROVOD_TIMELINE",
    "HVLITE_TIMELINE_MARK_CYCLES": "HOROVOD_TIMELINE_MARK_CYCLES",
    "HVLITE_AUTOTUNE": "HOROVOD_AUTOTUNE",
    "HVLITE_AUTOTUNE_LOG": "HOROVOD_AUTOTUNE_LOG",
    "HVLITE_LOG_LEVEL": "HOROVOD_LOG_LEVEL",
    "HVLITE_DYNAMIC_PROCESS_SETS": "HOROVOD_DYNAMIC_PROCESS_SETS",
}


class _Env:
    """The environment as hvlite reads it: an HVLITE_ name, else its Horovod alias.
    `.get(name)` returns the raw value; `.source(name)` names the variable it came from."""

    def __init__(self, env):
        self.env = env

    def source(self, name):
        if self.env.get(name) not in (None, ""):
            return name
        alias = ALIASES.get(name)
        if alias and self.env.get(alias) not in (None, ""):
            return alias
        return name

    def get(self, name, default=None):
        return self.env.get(self.source(name), default)


def _choice(env, name, choices, default):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(f"{env.source(name)}={raw!r} is not valid; accepted values: {', '.join(choices)}")
    return value


def _int(env, name, default, lo, hi):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{env.source(name)}={raw!r} is not an integer (accepted: {lo}..{hi})") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{env.source(name)}={raw!r} is out of range (accepted: {lo}..{hi})")
    return value


def _number(env, name, default, allow_zero=False):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{env.source(name)}={raw!r} is not a number") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{env.source(name)}={raw!r} must be {'non-negative' if allow_zero else 'positive'}")
    return value


def _float(env, name, default):
    return _number(env, name, default)


def _nonneg(env, name, default):
    return _number(env, name, default, allow_zero=True)


def _bool(env, name, default):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{env.source(name)}={raw!r} is not a boolean (accepted: 1/0, true/false, yes/no, on/off)")


def _tristate(env, name, default):
    """auto, or a boolean spelled as _bool accepts, returned as "auto", "1" or "0"."""
    raw = env.get(name)
    if raw is None or raw == "" or raw.strip().lower() == "auto":
        return default
    try:
        return "1" if _bool(env, name, None) else "0"
    except ConfigError:
        raise ConfigError(f"{env.source(name)}={raw!r} is not valid; accepted values: auto, "
                          "1/0, true/false, yes/no, on/off") from None


def load(env=None):
    """Settings from the environment (os.environ unless env is given)."""
    env = _Env(os.environ if env is None else env)
    d = Settings()
    settings = Settings(
        allreduce_algorithm=_choice(env, "HVLITE_ALLREDUCE_ALGORITHM", ALGORITHMS, d.allreduce_algorithm),
        mpi_thread_level=_choice(env, "HVLITE_MPI_THREAD_LEVEL", THREAD_LEVELS, d.mpi_thread_level),
        local_size=_int(env, "HVLITE_LOCAL_SIZE", d.local_size, 0, 1 << 20),
        segment_bytes=_int(env, "HVLITE_SEGMENT_BYTES", d.segment_bytes, 1024, 1 << 28),
        check_agreement=_bool(env, "HVLITE_CHECK_AGREEMENT", d.check_agreement),
        alpha_intra=_float(env, "HVLITE_ALPHA_INTRA", d.alpha_intra),
        beta_intra=_float(env, "HVLITE_BETA_INTRA", d.beta_intra),
        alpha_inter=_float(env, "HVLITE_ALPHA_INTER", d.alpha_inter),
        beta_inter=_float(env, "HVLITE_BETA_INTER", d.beta_inter),
        gamma=_float(env, "HVLITE_GAMMA", d.gamma),
        alpha_shm=_float(env, "HVLITE_ALPHA_SHM", d.alpha_shm),
        beta_mem=_float(env, "HVLITE_BETA_MEM", d.beta_mem),
        shm=_bool(env, "HVLITE_SHM", d.shm),
        shm_segment_bytes=_int(env, "HVLITE_SHM_SEGMENT_BYTES", d.shm_segment_bytes, 4096, 1 << 30),
        shm_redundant_bytes=_int(env, "HVLITE_SHM_REDUNDANT_BYTES", d.shm_redundant_bytes, -1, 1 << 40),
        cycle_time_ms=_nonneg(env, "HVLITE_CYCLE_TIME", d.cycle_time_ms),
        fusion_threshold=_int(env, "HVLITE_FUSION_THRESHOLD", d.fusion_threshold, 0, 1 << 40),
        fusion_tensor_limit=_int(env, "HVLITE_FUSION_TENSOR_LIMIT", d.fusion_tensor_limit, 1, 1 << 40),
        cache_capacity=_int(env, "HVLITE_CACHE_CAPACITY", d.cache_capacity, 0, 1 << 20),
        stall_check_seconds=_nonneg(env, "HVLITE_STALL_CHECK_TIME_SECONDS", d.stall_check_seconds),
        stall_shutdown_seconds=_nonneg(env, "HVLITE_STALL_SHUTDOWN_TIME_SECONDS",
                                       d.stall_shutdown_seconds),
        timeline=env.get("HVLITE_TIMELINE", d.timeline) or "",
        timeline_mark_cycles=_bool(env, "HVLITE_TIMELINE_MARK_CYCLES", d.timeline_mark_cycles),
        timeline_all_ranks=_bool(env, "HVLITE_TIMELINE_ALL_RANKS", d.timeline_all_ranks),
        log_level=_choice(env, "HVLITE_LOG_LEVEL", LOG_LEVELS, d.log_level),
        probe=_bool(env, "HVLITE_PROBE", d.probe),
        autotune=_bool(env, "HVLITE_AUTOTUNE", d.autotune),
        autotune_log=env.get("HVLITE_AUTOTUNE_LOG", d.autotune_log) or "",
        dynamic_process_sets=_bool(env, "HVLITE_DYNAMIC_PROCESS_SETS", d.dynamic_process_sets),
        ps_servers=_int(env, "HVLITE_PS_SERVERS", d.ps_servers, 0, 1 << 20),
        ps_timeout=_nonneg(env, "HVLITE_PS_TIMEOUT", d.ps_timeout),
        cuda_aware=_tristate(env, "HVLITE_CUDA_AWARE", d.cuda_aware),
        cuda_chunk_bytes=_int(env, "HVLITE_CUDA_CHUNK_BYTES", d.cuda_chunk_bytes, 4096, 1 << 34),
    )
    if env.get("HVLITE_STALL_CHECK_TIME_SECONDS") in (None, "") and \
            _bool(env, "HOROVOD_STALL_CHECK_DISABLE", False):
        settings = dataclasses.replace(settings, stall_check_seconds=0.0)
    return settings
