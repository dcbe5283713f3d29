"""Every setting, typed and validated, read once from the environment at init().

A bad value is an error that names the variable and what it accepts; nothing is silently ignored.
"""
import dataclasses
import os

from hvlite.errors import ConfigError

ALGORITHMS = ("auto", "ring", "rhd", "rd", "tree", "hierarchical", "mpi")
THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")


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
    alpha_intra: float = 2e-6      # cost model: seconds per message within a node
    beta_intra: float = 1 / 4e9    #   seconds per byte within a node
    alpha_inter: float = 10e-6     #   seconds per message between nodes
    beta_inter: float = 1 / 1.2e9  #   seconds per byte between nodes
    gamma: float = 1 / 6e9         #   seconds per byte reduced


def _choice(env, name, choices, default):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(f"{name}={raw!r} is not valid; accepted values: {', '.join(choices)}")
    return value


def _int(env, name, default, lo, hi):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer (accepted: {lo}..{hi})") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={raw!r} is out of range (accepted: {lo}..{hi})")
    return value


def _number(env, name, default, allow_zero=False):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{name}={raw!r} must be {'non-negative' if allow_zero else 'positive'}")
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
    raise ConfigError(f"{name}={raw!r} is not a boolean (accepted: 1/0, true/false, yes/no, on/off)")


def load(env=None):
    """Settings from the environment (os.environ unless env is given)."""
    env = os.environ if env is None else env
    d = Settings()
    return Settings(
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
    )
