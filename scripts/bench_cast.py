"""The fp16/bf16 compression's casts alone: NumPy's astype against the core's kernel (vector and
scalar code) and torch's own conversion, in one process, medians, ratios from the same run.

    python scripts/bench_cast.py                       # 1.9 M values and one 256x256 weight
    python scripts/bench_cast.py --sizes 1900000 --repeats 101

Two kinds of data: standard normal values, and gradient-like ones (x 1e-5), many of which land in
float16's subnormal range, where NumPy raises the FP underflow flag once per value (its slow case).
Each round times every method once (after one untimed call), in rotated order; the table gives
each method's median.
"""
import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from hvlite._core.kernels.cast import cast_into, simd  # noqa: E402


def methods(x, wire, torch):
    """name -> a function doing the float32 -> `wire` cast of x once."""
    out = np.empty(x.shape, wire)
    found = {
        "numpy astype": lambda: x.astype(wire),
        "core kernel": lambda: cast_into(x, np.empty(x.shape, wire)),
        "core kernel, reused output": lambda: cast_into(x, out),
        "core kernel, scalar code": lambda: cast_into(x, out, simd=False),
    }
    if torch is not None:
        t = torch.from_numpy(x)
        found["torch"] = (lambda: t.half()) if wire.name == "float16" else (lambda: t.bfloat16())
    return found


def medians(fns, repeats):
    """Median seconds per method over `repeats` rounds, the order rotated each round; each timed
    call follows an untimed one, so every method starts from warm caches."""
    names, times = list(fns), {n: [] for n in fns}
    for r in range(repeats):
        for n in names[r % len(names):] + names[:r % len(names)]:
            fns[n]()
            t0 = time.perf_counter()
            fns[n]()
            times[n].append(time.perf_counter() - t0)
    return {n: float(np.median(v)) for n, v in times.items()}


def load_torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    return torch


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1900000,65536", help="float32 values per cast")
    p.add_argument("--repeats", type=int, default=51)
    args = p.parse_args()
    import ml_dtypes
    torch = load_torch()
    print(f"vector code on this CPU: {simd()}; torch: {torch.__version__ if torch else 'absent'}\n")
    print("| values | data | to | method | median ms | GB/s (read+write) | vs numpy |")
    print("|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for n in map(int, args.sizes.split(",")):
        for label, scale in (("normal", 1.0), ("gradient-like (x1e-5)", 1e-5)):
            x = (rng.standard_normal(n) * scale).astype(np.float32)
            for wire in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
                with np.errstate(all="ignore"):
                    got = medians(methods(x, wire, torch), args.repeats)
                base = got["numpy astype"]
                for name, s in got.items():
                    gbs = n * 6 / s / 1e9
                    print(f"| {n:,} | {label} | {wire.name} | {name} | {s * 1e3:.3f} | {gbs:.1f} | "
                          f"{base / s:.1f}x |")


if __name__ == "__main__":
    main()
