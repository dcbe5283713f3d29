"""Every setting, typed and validated, read once from the environment at init().

A bad value is an error that names the variable and what it accepts; nothing is silently ignored.
Horovod's variables with the same meaning are accepted too (HOROVOD_FUSION_THRESHOLD, ...), so a
Horovod job's settings carry over; where both are set, the HVLITE_ one wins.
"""
import dataclasses
import difflib
import math
import os

from hvlite._core.codes import ALGORITHMS      # the table in _core/codes.h (starts no MPI)
from hvlite.errors import ConfigError

VERSION = "0.1.0"       # hvlite.__version__; part of the build identity ranks compare at init()

THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")
LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")


def _setting(default, env, doc, **more):
    """A Settings field: its default, the variable that sets it (`env`), and what it means
    (`doc`), kept as data so that markdown() documents every field and cannot drift. Optional:
    `choices` (the accepted values), `accepts` (the accepted values, in words), `unit`, and
    `note` (a longer explanation, rendered after the table)."""
    return dataclasses.field(default=default, metadata={"env": env, "doc": doc, **more})


@dataclasses.dataclass(frozen=True)
class Settings:
    allreduce_algorithm: str = _setting(
        "auto", "HVLITE_ALLREDUCE_ALGORITHM",
        "All-reduce algorithm for calls that pass no `algorithm=`. `auto` picks the cheapest by "
        "the cost model; `mpi` is MPI's own `MPI_Allreduce`, the reference.",
        choices=ALGORITHMS)
    mpi_thread_level: str = _setting(
        "multiple", "HVLITE_MPI_THREAD_LEVEL",
        "Thread level asked of MPI at `init()`, unless mpi4py already initialized MPI "
        "(`mpi_thread_level()` reports the level MPI provides). Process sets need `multiple`.",
        choices=THREAD_LEVELS,
        note="**Why `multiple` by default.** Only one hvlite thread calls MPI at a time, so "
        "`serialized` would be enough, and it is available. But measured on 2-core machines "
        "with the MPICH wheel: at `serialized`, MPICH's busy-wait never yields the CPU, so a "
        "job with more ranks than cores (every test run, many laptops) runs 100× slower (a 4 "
        "KiB all-reduce at 8 ranks: 50 ms against 0.3 ms). And MPICH's own large all-reduce is "
        "2–4× *slower* at `serialized` with its default settings (it switches to shared-memory "
        "collectives with small cells). hvlite's algorithms run at the same bandwidth at both "
        "levels; small messages cost about 2 µs more at `multiple`. If mpi4py was imported and "
        "initialized MPI before `hvlite.init()`, its level stands. At `serialized`, do not call"
        " MPI yourself while hvlite collectives are in flight (the coordinator thread may be "
        "inside MPI at that moment); ask for `multiple` if your own code calls MPI from several"
        " threads at once.")
    local_size: int = _setting(
        0, "HVLITE_LOCAL_SIZE",
        "0: nodes are the ranks that share memory (`MPI_COMM_TYPE_SHARED`). K > 0: pretend "
        "nodes of K consecutive ranks (tests, experiments).", unit="ranks")
    segment_bytes: int = _setting(
        256 << 10, "HVLITE_SEGMENT_BYTES",
        "Receive segment the reduce steps pipeline through (two are kept, allocated once).",
        unit="bytes")
    check_agreement: bool = _setting(
        True, "HVLITE_CHECK_AGREEMENT",
        "Metadata check (a second small all-reduce) on the direct synchronous path to the "
        "algorithms that benchmarks use; jobs agree through the coordinator instead.")
    cycle_time_ms: float = _setting(
        1.0, "HVLITE_CYCLE_TIME",
        "Least time between negotiation rounds while work stays pending, so what is submitted "
        "meanwhile fuses into the next round; an idle coordinator starts a round at once.",
        unit="ms")
    fusion_threshold: int = _setting(
        64 << 20, "HVLITE_FUSION_THRESHOLD",
        "Bytes per fused all-reduce; 0 turns fusion off.", unit="bytes")
    fusion_tensor_limit: int = _setting(
        256 << 10, "HVLITE_FUSION_TENSOR_LIMIT",
        "Tensors of at least this many bytes are reduced alone, in their output (two copies "
        "saved).", unit="bytes")
    piggyback_bytes: int = _setting(
        16 << 10, "HVLITE_PIGGYBACK_BYTES",
        "Room in every negotiation round's message for small cached all-reduces left to auto: "
        "one ready on every rank comes back reduced with the agreement, in one exchange instead "
        "of two. Across nodes capped at what one message latency moves (alpha/beta of the cost "
        "model); not used within one node that has the shared segment (a small shared-memory "
        "all-reduce is cheaper there); 0 turns it off.", unit="bytes")
    round16: bool = _setting(
        True, "HVLITE_COMPRESSION_ROUND_IN_REDUCTION",
        "fp16/bf16 compression on a process set within one node reduces the float32 arrays "
        "themselves, rounding every operand and result to 16 bits in the reduction: the same bits "
        "as casting, reducing the casts and casting back, without the casts' passes over memory "
        "(which cost more than the halved bytes save where the link is memory, "
        "[compression](compression.md)); `0` casts as across nodes.")
    cache_capacity: int = _setting(
        1024, "HVLITE_CACHE_CAPACITY",
        "Response-cache slots: a name agreed before is agreed again with one bit; 0 turns the "
        "cache off.", unit="slots")
    stall_check_seconds: float = _setting(
        60.0, "HVLITE_STALL_CHECK_TIME_SECONDS",
        "Report collectives some rank has waited on this long, with the ranks that have not "
        "submitted them (rank 0, stderr); 0 turns the check off, and so does "
        "`HOROVOD_STALL_CHECK_DISABLE=1` when no check time is set.", unit="s")
    stall_shutdown_seconds: float = _setting(
        0.0, "HVLITE_STALL_SHUTDOWN_TIME_SECONDS",
        "A stall this long fails every pending handle with `StallError` on every rank; 0: never.",
        unit="s")
    lost_rank_seconds: float = _setting(
        5.0, "HVLITE_LOST_RANK_SECONDS",
        "A rank that leaves a waiting rank's pings unanswered this long (killed, stopped, exited "
        "without `shutdown()`) is lost: every rank waiting on it raises `LostRankError` naming "
        "it. Pings start once a wait has lasted 0.25 s; idle ranks answer them too.", unit="s")
    timeline: str = _setting(
        "", "HVLITE_TIMELINE",
        "Write a Chrome trace to this path from `init()` on ([timeline](timeline.md)).")
    timeline_mark_cycles: bool = _setting(
        False, "HVLITE_TIMELINE_MARK_CYCLES",
        "Mark each negotiation round on the trace's coordinator row.")
    timeline_all_ranks: bool = _setting(
        False, "HVLITE_TIMELINE_ALL_RANKS",
        "Every rank writes its own trace (rank r: `<name>.rank<r><ext>`), not only rank 0.")
    log_level: str = _setting(
        "warning", "HVLITE_LOG_LEVEL",
        "`debug` prints the measured cost model and `auto`'s crossover sizes (rank 0, stderr).",
        choices=LOG_LEVELS)
    probe: bool = _setting(
        True, "HVLITE_PROBE",
        "Measure the cost model (ping-pongs, a reduction, a copy) at `init()` for `auto`; `0` "
        "uses the `HVLITE_ALPHA_*`, `HVLITE_BETA_*` and `HVLITE_GAMMA` figures.")
    calibrate: bool = _setting(
        True, "HVLITE_CALIBRATE",
        "`auto` tries, on each size class's first calls (powers of two, 1 KiB to 256 MiB), the "
        "algorithms the cost model puts within 2.5x of its best (1.4x across nodes), twice each, "
        "and the ones within 2x of the fastest once more, keeps the fastest (the slowest rank's times, so all ranks "
        "agree) and confirms it on later calls, measuring again when they disagree; `0` leaves "
        "`auto` to the model.")
    autotune: bool = _setting(
        False, "HVLITE_AUTOTUNE",
        "Tune the fusion threshold and cycle time over the first steps, then freeze "
        "([autotune](architecture.md#autotune)).")
    autotune_log: str = _setting(
        "", "HVLITE_AUTOTUNE_LOG", "CSV of every autotune trial (written by rank 0).")
    dynamic_process_sets: bool = _setting(
        False, "HVLITE_DYNAMIC_PROCESS_SETS",
        "Allow `add_process_set` / `remove_process_set` after `init()`.")
    ps_servers: int = _setting(
        0, "HVLITE_PS_SERVERS",
        "hvlite.ps: server ranks (the last S) when `ps.init()` gets no `servers=`; 0 means 1.",
        unit="ranks")
    ps_timeout: float = _setting(
        300.0, "HVLITE_PS_TIMEOUT",
        "hvlite.ps: how long a rank waits for a peer before failing; 0 waits forever.", unit="s")
    alpha_intra: float = _setting(
        2e-6, "HVLITE_ALPHA_INTRA", "Cost model when not probed: time per message within a node.",
        unit="s")
    beta_intra: float = _setting(
        1 / 4e9, "HVLITE_BETA_INTRA", "Cost model: time per byte sent within a node.",
        unit="s/byte")
    alpha_inter: float = _setting(
        10e-6, "HVLITE_ALPHA_INTER", "Cost model: time per message between nodes.", unit="s")
    beta_inter: float = _setting(
        1 / 1.2e9, "HVLITE_BETA_INTER", "Cost model: time per byte sent between nodes.",
        unit="s/byte")
    gamma: float = _setting(
        1 / 6e9, "HVLITE_GAMMA", "Cost model: time per byte reduced.", unit="s/byte")
    alpha_shm: float = _setting(
        1e-6, "HVLITE_ALPHA_SHM", "Cost model: time per flag barrier in the shared segment.",
        unit="s")
    beta_mem: float = _setting(
        1 / 10e9, "HVLITE_BETA_MEM", "Cost model: time per byte copied.", unit="s/byte")
    shm: bool = _setting(
        True, "HVLITE_SHM",
        "Map a shared-memory segment per node (algorithm `shm`, hierarchical's node stages, "
        "zero-copy fusion); `0` turns it off.")
    shm_segment_bytes: int = _setting(
        1 << 20, "HVLITE_SHM_SEGMENT_BYTES",
        "Per-rank slot of the shared segment: the pipeline segment of the shm all-reduce; "
        "larger buffers go through in segments (tuned by measurement, see "
        "[benchmarks](benchmarks.md#shared-memory-tuning)).", unit="bytes")
    shm_direct: bool = _setting(
        True, "HVLITE_SHM_DIRECT",
        "On one node, the shm all-reduce reads the peers' inputs and writes their outputs "
        "directly (cross-memory attach, and the peers' shared output arenas) instead of "
        "copying through the segment's slots, where the kernel allows it (tried at `init()`): "
        "with `HVLITE_CALIBRATE` on, each size class measures both ways on its first calls and "
        "keeps the faster ([architecture](architecture.md#shared-memory-within-a-node)), "
        "else it always reads directly; `0` always goes through the slots.")
    shm_ptracer: bool = _setting(
        True, "HVLITE_SHM_PTRACER",
        "Where Yama's ptrace scope is 1 (siblings may not attach to each other), let the node's "
        "ranks attach for the direct path by `PR_SET_PTRACER` (the one peer's pid with two "
        "ranks on a node, else any process of the user) while a set uses it, undone at shutdown "
        "([security](security.md#least-privilege)); `0` never does, and the direct "
        "path then runs only where the kernel allows it already.")
    shm_redundant_bytes: int = _setting(
        -1, "HVLITE_SHM_REDUNDANT_BYTES",
        "Up to this many bytes per segment every rank reduces all slots (one barrier) instead "
        "of its slice (two); -1: 256 KiB on nodes of 2 ranks, 16 KiB on larger ones (measured).",
        unit="bytes")
    cuda_aware: str = _setting(
        "auto", "HVLITE_CUDA_AWARE",
        "Hand device arrays straight to MPI? `auto` asks the library "
        "(`MPIX_Query_cuda_support`); a boolean overrides it (1 on a library that is not "
        "CUDA-aware makes MPI read device memory as host memory: a crash).",
        accepts="`auto` or a boolean")
    cuda_chunk_bytes: int = _setting(
        4 << 20, "HVLITE_CUDA_CHUNK_BYTES",
        "Host staging of device buffers: bytes per chunk (two pinned slots).", unit="bytes")

    def cost_model(self):
        return {"alpha_intra": self.alpha_intra, "beta_intra": self.beta_intra,
                "alpha_inter": self.alpha_inter, "beta_inter": self.beta_inter,
                "gamma": self.gamma, "alpha_shm": self.alpha_shm, "beta_mem": self.beta_mem}

    def context_args(self):
        """What the core's algorithm context takes: the shared segment's settings, the probe,
        and calibration (2: rank 0 also prints what it measured)."""
        calibrate = (2 if self.log_level in ("debug", "trace") else 1) if self.calibrate else 0
        return (self.shm, self.shm_segment_bytes, self.shm_redundant_bytes, self.probe, calibrate,
                self.shm_direct, self.shm_ptracer)


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


_NUMBER_MAX = 1e9      # no time, rate or cost figure is near this; nan and inf are refused too


def _number(env, name, default, allow_zero=False):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{env.source(name)}={raw!r} is not a number") from None
    if not math.isfinite(value) or value > _NUMBER_MAX:
        raise ConfigError(f"{env.source(name)}={raw!r} must be a finite number up to "
                          f"{_NUMBER_MAX:g}")
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
        shm_direct=_bool(env, "HVLITE_SHM_DIRECT", d.shm_direct),
        shm_ptracer=_bool(env, "HVLITE_SHM_PTRACER", d.shm_ptracer),
        cycle_time_ms=_nonneg(env, "HVLITE_CYCLE_TIME", d.cycle_time_ms),
        fusion_threshold=_int(env, "HVLITE_FUSION_THRESHOLD", d.fusion_threshold, 0, 1 << 40),
        fusion_tensor_limit=_int(env, "HVLITE_FUSION_TENSOR_LIMIT", d.fusion_tensor_limit, 1, 1 << 40),
        piggyback_bytes=_int(env, "HVLITE_PIGGYBACK_BYTES", d.piggyback_bytes, 0, 1 << 20),
        round16=_bool(env, "HVLITE_COMPRESSION_ROUND_IN_REDUCTION", d.round16),
        cache_capacity=_int(env, "HVLITE_CACHE_CAPACITY", d.cache_capacity, 0, 1 << 20),
        stall_check_seconds=_nonneg(env, "HVLITE_STALL_CHECK_TIME_SECONDS", d.stall_check_seconds),
        stall_shutdown_seconds=_nonneg(env, "HVLITE_STALL_SHUTDOWN_TIME_SECONDS",
                                       d.stall_shutdown_seconds),
        lost_rank_seconds=_float(env, "HVLITE_LOST_RANK_SECONDS", d.lost_rank_seconds),
        timeline=env.get("HVLITE_TIMELINE", d.timeline) or "",
        timeline_mark_cycles=_bool(env, "HVLITE_TIMELINE_MARK_CYCLES", d.timeline_mark_cycles),
        timeline_all_ranks=_bool(env, "HVLITE_TIMELINE_ALL_RANKS", d.timeline_all_ranks),
        log_level=_choice(env, "HVLITE_LOG_LEVEL", LOG_LEVELS, d.log_level),
        probe=_bool(env, "HVLITE_PROBE", d.probe),
        calibrate=_bool(env, "HVLITE_CALIBRATE", d.calibrate),
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


# Settings that may differ from rank to rank: what one rank writes or how long it waits alone.
# Every other field steers a collective step, so init() checks that all ranks agree on it.
PER_RANK = frozenset({"timeline", "timeline_mark_cycles", "timeline_all_ranks", "log_level",
                      "autotune_log", "ps_timeout"})
AGREED = frozenset(f.name for f in dataclasses.fields(Settings)) - PER_RANK


def agreed_values(settings):
    """{variable: value} of the settings every rank must share (init() compares them)."""
    return {f.metadata["env"]: getattr(settings, f.name) for f in dataclasses.fields(settings)
            if f.name in AGREED}


def disagreements(records, limit=8):
    """Messages for the keys whose values differ between ranks. `records`: one {key: value} per
    rank, in rank order; each message names the key and every rank's value (the first `limit`)."""
    out = []
    for key in records[0]:
        values = [r.get(key) for r in records]
        if all(v == values[0] for v in values):
            continue
        shown = ", ".join(f"rank {i}: {v!r}" for i, v in enumerate(values[:limit]))
        more = f", ... ({len(values) - limit} more ranks)" if len(values) > limit else ""
        out.append(f"{key}: {shown}{more}")
    return out


# Variables read outside Settings (not at init()): (name, read by, meaning).
OTHER_VARIABLES = (
    ("HVLITE_MPIEXEC", "`hvliterun`, the tests",
     "The mpiexec to run (`hvliterun --mpiexec` wins); default: the one next to the Python "
     "running, else the first on `PATH`."),
    ("HVLITE_BUILD_JOBS", "`setup.py`", "Parallel compile jobs for the core's extensions."),
    ("HVLITE_RUN_STATUS_DIR", "`hvliterun` (sets it on every rank)",
     "Where each rank's supervisor writes the record the failure summary is made from: a "
     "directory hvliterun makes for the job (in `--status-dir` if given) and removes after it."),
    ("HVLITE_RUN_JOB", "`hvliterun` (sets it on every rank)",
     "A token unique to the job: after a failed job, hvliterun ends the processes of this user "
     "that still carry it."),
    ("HVLITE_ELASTIC_DIR", "`hvlite.elastic`; `hvliterun --elastic` sets it on every rank",
     "Where `State.commit()` writes each rank's commits (`rank-<r>/` below it); unset: commits "
     "stay in memory. `hvliterun --elastic` passes `--elastic-dir`, else a directory it makes "
     "for the job ([elastic training](elastic.md))."),
    ("HVLITE_ELASTIC_RESTART", "`hvlite.elastic` (set by `hvliterun --elastic`)",
     "How many launches of the job came before this one: 0 on the first. Its presence tells "
     "`hvlite.elastic.run` that a launcher will relaunch the job."),
    ("HVLITE_ELASTIC_CAUSE", "`hvlite.elastic` (set by `hvliterun --elastic`)",
     "Why this launch was started (the failure it restarts after, or new hosts): printed by rank"
     " 0 and marked on the timeline after the state is restored."),
    ("HVLITE_SANITIZE", "`setup.py`",
     "`1`: build the core with AddressSanitizer and UBSan (`make test-asan` sets it)."),
)
# Prefixes of variables that belong to the test suite, not to hvlite.
_OTHER_PREFIXES = ("HVLITE_TEST_",)

# Horovod's variables that have no meaning here, and why: said as such, not as a misspelling
_GPU_OPS = ("device arrays go through hvlite's own device path, staged through host memory or "
            "to a CUDA-aware MPI (docs/gpu.md); there is no NCCL or GPU-operations choice")
IGNORED_HOROVOD = {
    "HOROVOD_GPU_OPERATIONS": _GPU_OPS, "HOROVOD_GPU_ALLREDUCE": _GPU_OPS,
    "HOROVOD_GPU_ALLGATHER": _GPU_OPS, "HOROVOD_GPU_BROADCAST": _GPU_OPS,
    "HOROVOD_GPU_ALLTOALL": _GPU_OPS, "HOROVOD_GPU_REDUCESCATTER": _GPU_OPS,
    "HOROVOD_NUM_NCCL_STREAMS": _GPU_OPS, "HOROVOD_NCCL_HOME": _GPU_OPS,
    "HOROVOD_BATCH_D2D_MEMCOPIES": _GPU_OPS, "HOROVOD_ENABLE_XLA_OPS": _GPU_OPS,
    "HOROVOD_CPU_OPERATIONS": "CPU collectives are always hvlite's own algorithms over MPI "
                              "(HVLITE_ALLREDUCE_ALGORITHM picks among them); there is no Gloo or "
                              "oneCCL choice",
    "HOROVOD_CONTROLLER": "the controller is always MPI",
    "HOROVOD_WITH_MPI": "a build option of Horovod; hvlite is always built with MPI",
    "HOROVOD_WITHOUT_MPI": "a build option of Horovod; hvlite is always built with MPI",
    "HOROVOD_WITH_GLOO": "a build option of Horovod; hvlite has no Gloo",
    "HOROVOD_WITHOUT_GLOO": "a build option of Horovod; hvlite has no Gloo",
    "HOROVOD_WITH_PYTORCH": "a build option of Horovod; hvlite.torch needs none",
    "HOROVOD_WITH_TENSORFLOW": "a build option of Horovod; hvlite has no TensorFlow layer",
    "HOROVOD_WITHOUT_TENSORFLOW": "a build option of Horovod",
    "HOROVOD_WITHOUT_MXNET": "a build option of Horovod", "HOROVOD_WITH_MXNET": "a build option of Horovod",
}


def known_variables():
    """Every HVLITE_ / HOROVOD_ variable hvlite reads."""
    names = {f.metadata["env"] for f in dataclasses.fields(Settings)}
    names |= set(ALIASES.values()) | {"HOROVOD_STALL_CHECK_DISABLE"}
    return names | {name for name, _, _ in OTHER_VARIABLES}


def ignored_horovod_variables(env=None):
    """[(name, why)] for Horovod's variables set here that have no meaning in hvlite."""
    env = os.environ if env is None else env
    return [(name, IGNORED_HOROVOD[name]) for name in sorted(env) if name in IGNORED_HOROVOD]


def unknown_variables(env=None):
    """[(name, closest known name or None)] for HVLITE_* / HOROVOD_* variables hvlite does not
    read: a misspelt setting would otherwise be silently ignored."""
    env = os.environ if env is None else env
    known = known_variables()
    out = []
    for name in sorted(env):
        if not name.startswith(("HVLITE_", "HOROVOD_")) or name in known or \
                name.startswith(_OTHER_PREFIXES) or name in IGNORED_HOROVOD:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        out.append((name, close[0] if close else None))
    return out

_INTRO = """\
Every setting is read once, at `init()`, into one typed, frozen object
(`hvlite.config.Settings`). A bad value raises `ConfigError` naming the variable and what it
accepts; nothing is silently ignored. Booleans are written `1`/`0`, `true`/`false`, `yes`/`no`
or `on`/`off`. Where Horovod has a variable with the same meaning, it is accepted too, so a
Horovod job's settings carry over; where both are set, the `HVLITE_` one wins. `hvliterun`
options set these variables on every rank ([launching jobs](../README.md#hvliterun))."""


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _amount(value, unit):
    """A default as the page shows it: the value, and a readable size or rate beside it."""
    if isinstance(value, bool):
        return f"`{int(value)}`"
    if isinstance(value, str):
        return f"`{value}`" if value else "(unset)"
    if isinstance(value, int):
        if unit == "bytes" and value >= 1024 and value % 1024 == 0:
            size, suffix = value >> 10, "KiB"
            if size % 1024 == 0:
                size, suffix = size >> 10, "MiB"
            return f"{value} ({size} {suffix})"
        return str(value)
    shown = f"{value:.4g}"
    if unit == "s/byte":
        return f"{shown} ({1 / value / 1e9:.3g} GB/s)"
    if unit == "s" and value and value < 1e-3:
        return f"{shown} ({value * 1e6:.3g} µs)"
    return shown


def _kind(f):
    meta = f.metadata
    if "choices" in meta:
        return "one of " + ", ".join(f"`{c}`" for c in meta["choices"])
    if "accepts" in meta:
        return meta["accepts"]
    name = f.type if isinstance(f.type, str) else f.type.__name__
    return f"{name}, {meta['unit']}" if "unit" in meta else name


def undocumented():
    """Names of the Settings fields that lack a variable or a doc (the docs test wants none)."""
    return [f.name for f in dataclasses.fields(Settings)
            if not f.metadata.get("env") or not f.metadata.get("doc")]


def markdown():
    """docs/configuration.md: every setting's variable (and Horovod alias), type, default and
    meaning, from the Settings fields. `python -m hvlite.config > docs/configuration.md`."""
    missing = undocumented()
    if missing:
        raise ValueError(f"Settings fields without env/doc metadata: {', '.join(missing)}")
    fields = dataclasses.fields(Settings)
    out = ["# Configuration", "",
           "<!-- Generated from hvlite/config.py by `python -m hvlite.config > "
           "docs/configuration.md`; edit the Settings fields there, not this file. -->", "",
           _INTRO, "", "## Settings", "",
           "| variable | type | default | meaning |", "|---|---|---|---|"]
    for f in fields:
        env = f.metadata["env"]
        name = f"`{env}`"
        if env in ALIASES:
            name += f"<br>Horovod: `{ALIASES[env]}`"
        default = _amount(f.default, f.metadata.get("unit"))
        meaning = _cell(f.metadata["doc"])
        out.append(f"| {name} | {_cell(_kind(f))} | {_cell(default)} | {meaning} |")
    notes = [f for f in fields if f.metadata.get("note")]
    if notes:
        out += ["", "## Notes"]
        for f in notes:
            out += ["", f"### `{f.metadata['env']}`", "", f.metadata["note"]]
    per_rank = [f"`{f.metadata['env']}`" for f in fields if f.name in PER_RANK]
    out += ["", "## Settings every rank must share", "",
            "`init()` compares every setting except " + ", ".join(per_rank) + " across the "
            "ranks in one small collective, together with the thread level MPI provides, the "
            "process sets passed to `init()` and the build; a difference raises `ConfigError` on "
            "every rank, naming the variable and each rank's value "
            "([errors](errors.md#settings-that-disagree)). A bad value on one rank fails "
            "`init()` on every rank, naming that rank. An `HVLITE_` or `HOROVOD_` variable that "
            "hvlite does not read is reported at `init()` (rank 0, a warning naming the closest "
            "known variable)."]
    out += ["", "## Horovod's variables", "",
            "Accepted under Horovod's names: " +
            ", ".join(f"`{alias}`" for alias in ALIASES.values()) +
            ", and `HOROVOD_STALL_CHECK_DISABLE`. These of Horovod's mean nothing here; `init()` "
            "says so when one is set (rank 0, a warning with the reason):", "",
            "| variable | why hvlite ignores it |", "|---|---|"]
    out += [f"| `{name}` | {_cell(why)} |" for name, why in sorted(IGNORED_HOROVOD.items())]
    out += ["", "## Read outside the settings", "",
            "| variable | read by | meaning |", "|---|---|---|"]
    out += [f"| `{name}` | {_cell(where)} | {_cell(doc)} |" for name, where, doc in OTHER_VARIABLES]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import sys
    from hvlite import config as _canonical    # the package's copy, not runpy's second one
    sys.stdout.write(_canonical.markdown())
