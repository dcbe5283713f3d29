"""The cost model past this machine: the pieces behind scripts/simulate_scale.py.

Every all-reduce time here is `hvlite._core.tuning.cost_model.predict_seconds`, the same model that
algorithm="auto" chooses with, so the simulator and auto cannot drift apart. This module adds
what the model leaves out: figures per level (a node's link, the memory inside a node), the
emulated measurements to check against, a training step around the all-reduce (overlap with the
backward pass, gradient buckets) and compression (fp16 casts, top-k through an allgather).

Units: seconds, bytes, bits per second for links.
"""
import csv
import dataclasses
import math
import pathlib

from hvlite._core.tuning.cost_model import choose_name, model_from, predict_seconds

ROOT = pathlib.Path(__file__).resolve().parents[1]
MEASURED_CSV = ROOT / "docs" / "bench_multihost.csv"
# The emulated configurations measured: (CSV, hosts, ranks per host). The CSVs hold 4 ranks each.
CONFIGURATIONS = [(MEASURED_CSV, 2, 2), (ROOT / "docs" / "bench_multihost_4x1.csv", 4, 1)]

# The algorithms the simulator compares. "shm" is the shared segment within each node, then the
# cross-node step on each rank's slice: hierarchical over shm.
ALGORITHMS = ("ring", "rhd", "rd", "tree", "hierarchical", "shm")
LABELS = {"shm": "shm-hierarchical"}

# Measured on the 2-core machine the emulated runs used (nice'd, other jobs running):
# hvlite._core.tuning.probes.reduce_seconds_per_byte() 11 GB/s, copy_seconds_per_byte() 8.1 GB/s,
# a ping-pong between two ranks of one emulated host (MPICH's shared memory) 1.5 us and
# 6 GB/s, NumPy's float32 -> float16 -> float32 round trip 0.56 GB/s of float32 and its
# argpartition for a 1% top-k 0.72 GB/s. `simulate_scale.py --measure` measures the first two
# again.
GAMMA = 1 / 11e9
BETA_MEM = 1 / 8.1e9
ALPHA_INTRA = 1.5e-6
BETA_INTRA = 1 / 6e9
ALPHA_SHM = 1e-6
CAST_ROUND_TRIP = 1 / 0.56e9      # s per float32 byte, both casts
TOPK_SELECT = 1 / 0.72e9          # s per float32 byte scanned


def parse_rate(text):
    """'500mbit', '2.5gbit', '25G' -> bits per second."""
    t = text.strip().lower().replace("bit", "").replace("/s", "").replace("bps", "")
    mult = {"k": 1e3, "m": 1e6, "g": 1e9}.get(t[-1:], 1.0)
    return float(t[:-1] if t[-1:] in "kmg" else t) * mult


def human_bytes(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:g} {unit}"
    return f"{n:g} B"


@dataclasses.dataclass
class Figures:
    """The model's figures per level. β_inter is one node's link (all its ranks share it)."""
    link_bps: float
    alpha_inter: float
    alpha_intra: float = ALPHA_INTRA
    beta_intra: float = BETA_INTRA
    gamma: float = GAMMA
    beta_mem: float = BETA_MEM
    alpha_shm: float = ALPHA_SHM

    def model(self, gamma_scale=1.0):
        """The CostModel dict; gamma_scale multiplies γ (2 for float16 sums at float32's
        elements per second)."""
        return model_from(alpha_intra=self.alpha_intra, beta_intra=self.beta_intra,
                          alpha_inter=self.alpha_inter, beta_inter=8.0 / self.link_bps,
                          gamma=self.gamma * gamma_scale, alpha_shm=self.alpha_shm,
                          beta_mem=self.beta_mem)


def allreduce_seconds(algorithm, nbytes, ranks, per_node, figures, gamma_scale=1.0):
    """Predicted seconds for one all-reduce of nbytes over `ranks` ranks, `per_node` per node
    (placed node by node)."""
    nodes = max(1, ranks // per_node)
    return predict_seconds(algorithm, float(nbytes), ranks, figures.model(gamma_scale),
                           nodes=nodes, local_size=min(per_node, ranks))


def auto_choice(nbytes, ranks, per_node, figures, shm=True):
    nodes = max(1, ranks // per_node)
    return choose_name(float(nbytes), ranks, figures.model(), nodes=nodes,
                       local_size=min(per_node, ranks), uniform=True, shm=shm)


# ---- the check against the emulated cluster ---------------------------------------------------

CHECKED = ("ring", "rhd", "hierarchical", "shm", "auto")


def load_measured(path=MEASURED_CSV):
    """{(link, size, algorithm): [median of run 1, median of run 2, ...]} plus the run layout."""
    cells = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            key = (row["link"], int(row["bytes"]), row["algorithm"])
            cells.setdefault(key, []).append(float(row["median_s"]))
    return cells


def cpu_limited(cells, link, hosts=2, factor=1.5):
    """A link is not the limit when even the fastest algorithm at the largest size took more
    than `factor` times the link's time for the fewest bytes a host must send for an all-reduce
    of n, 2((H-1)/H)n on H hosts (hierarchical's). Returns (limited?, that ratio)."""
    sizes = sorted({s for (lk, s, _) in cells if lk == link})
    n = sizes[-1]
    best = min(min(v) for (lk, s, a), v in cells.items() if lk == link and s == n and a != "mpi")
    ratio = best / (2 * (hosts - 1) / hosts * n * 8 / parse_rate(link))
    return ratio > factor, ratio


def check(cells, hosts=2, per_node=2, tolerance=0.25, figures_for=None, alpha_inter=30e-6):
    """One row per (link, size, algorithm) of `hosts` hosts of `per_node` ranks: measured
    medians, prediction, errors, whether every run is within tolerance, and whether the link was
    the limit there."""
    rows = []
    ranks = hosts * per_node
    links = sorted({k[0] for k in cells}, key=parse_rate)
    for link in links:
        limited, ratio = cpu_limited(cells, link, hosts=hosts)
        fig = (figures_for or (lambda rate: Figures(rate, alpha_inter)))(parse_rate(link))
        for size in sorted({k[1] for k in cells if k[0] == link}):
            for algo in CHECKED:
                measured = cells.get((link, size, algo))
                if not measured:
                    continue
                name = auto_choice(size, ranks, per_node, fig) if algo == "auto" else algo
                pred = allreduce_seconds(name, size, ranks, per_node, fig)
                errors = [pred / m - 1 for m in measured]
                rows.append({"layout": f"{hosts}x{per_node}", "link": link, "bytes": size, "algorithm": algo, "model_name": name,
                             "measured": measured, "predicted": pred, "errors": errors,
                             "within": all(abs(e) <= tolerance for e in errors),
                             "link_bound": not limited, "best_over_link": ratio})
    return rows


# ---- a training step around the all-reduce -----------------------------------------------------

# the fusion thresholds hvlite's autotune tries (docs/architecture.md#autotune)
BUCKETS = (1 << 20, 4 << 20, 16 << 20, 64 << 20)


@dataclasses.dataclass
class Step:
    """A step's compute: `compute_s` in all, the backward pass `backward_fraction` of it.
    With overlap, gradients are all-reduced in buckets as the backward pass produces them; the
    bucket size is the best of `bucket_sizes` and the whole gradient (one bucket, which is no
    overlap at all), as autotune would settle on. Each bucket is one coordinator round: at
    least `cycle_s`, and an agreement (a small all-reduce) before the data moves."""
    compute_s: float = 0.250
    backward_fraction: float = 2 / 3
    bucket_sizes: tuple = BUCKETS
    cycle_s: float = 1e-3           # HVLITE_CYCLE_TIME: the least time between rounds


def buckets(nbytes, bucket_bytes):
    k = max(1, math.ceil(nbytes / bucket_bytes))
    return [nbytes / k] * k


def overlapped_seconds(nbytes, bucket_time, step, bucket_bytes):
    """Step time with buckets of about bucket_bytes: bucket i is ready once the backward pass
    has produced its bytes (uniformly over the pass), starts when it is ready and the previous
    bucket is done; what still runs when the backward pass ends is exposed (at least the last
    bucket)."""
    backward = step.compute_s * step.backward_fraction
    done, produced = 0.0, 0.0
    for b in buckets(nbytes, bucket_bytes):
        produced += b
        ready = backward * produced / nbytes
        done = max(done, ready) + bucket_time(b)
    return step.compute_s + max(0.0, done - backward)


def best_bucket(nbytes, bucket_time, step):
    """(step seconds, bucket bytes) for the best bucket size, the whole gradient included."""
    sizes = [b for b in step.bucket_sizes if b < nbytes] + [nbytes]
    return min((overlapped_seconds(nbytes, bucket_time, step, b), b) for b in sizes)


def step_seconds(nbytes, bucket_time, step, overlap):
    """Step time when an all-reduce of b bytes takes bucket_time(b) seconds: without overlap
    the whole gradient is reduced in one call after the backward pass."""
    if not overlap:
        return step.compute_s + bucket_time(nbytes)
    return best_bucket(nbytes, bucket_time, step)[0]


@dataclasses.dataclass
class Compression:
    """How the gradient travels. method: none (float32), fp16 (cast, all-reduce, cast back),
    topk (the `ratio` largest magnitudes as value + int32 index, all-gathered and summed)."""
    method: str = "none"
    ratio: float = 0.01
    cast_round_trip: float = CAST_ROUND_TRIP
    topk_select: float = TOPK_SELECT

    @property
    def label(self):
        return f"top-{self.ratio:g}" if self.method == "topk" else self.method


def topk_seconds(nbytes, ranks, figures, compression):
    """Top-k through hvlite's allgather: select, then a ring allgather of every rank's
    (value, index) pairs (each node's link carries all the others' pairs), then sum them."""
    pairs = compression.ratio * nbytes / 4 * 8          # bytes per rank: float32 value + int32 index
    gather = (ranks - 1) * (figures.alpha_inter + pairs * 8.0 / figures.link_bps)
    return nbytes * compression.topk_select + gather + ranks * pairs * figures.gamma


def bucket_time_fn(algorithm, ranks, per_node, figures, compression):
    """seconds(b) for one bucket of b float32 bytes under `compression`."""
    if compression.method == "none":
        return lambda b: allreduce_seconds(algorithm, b, ranks, per_node, figures)
    if compression.method == "fp16":
        return lambda b: (allreduce_seconds(algorithm, b / 2, ranks, per_node, figures, 2.0)
                          + b * compression.cast_round_trip)
    if compression.method == "topk":
        return lambda b: topk_seconds(b, ranks, figures, compression)
    raise ValueError(f"unknown compression {compression.method!r}")


AGREEMENT_BYTES = 64


def in_rounds(fn, ranks, per_node, figures, step):
    """seconds(b) of one coordinator round moving a bucket of b bytes: the agreement (the
    cheapest algorithm on a few bytes), then the bucket, and never under the cycle time."""
    agree = min(allreduce_seconds(a, AGREEMENT_BYTES, ranks, per_node, figures)
                for a in ("tree", "rd", "rhd", "ring"))
    return lambda b: max(step.cycle_s, agree + fn(b))


def scenario(nbytes, ranks, per_node, figures, step, compression, overlap, algorithms=ALGORITHMS):
    """The best algorithm for this scenario and its step: {algorithm, bucket_bytes, step_s,
    exposed_s, share} (share: exposed aggregation over the step). top-k has no choice of
    algorithm."""
    best = None
    for algo in (algorithms if compression.method != "topk" else ("allgather",)):
        fn = in_rounds(bucket_time_fn(algo, ranks, per_node, figures, compression), ranks,
                       per_node, figures, step)
        t, b = best_bucket(nbytes, fn, step) if overlap else (step.compute_s + fn(nbytes), nbytes)
        if best is None or t < best["step_s"]:
            best = {"algorithm": algo, "bucket_bytes": b, "step_s": t}
    best["exposed_s"] = best["step_s"] - step.compute_s
    best["share"] = best["exposed_s"] / best["step_s"]
    return best
