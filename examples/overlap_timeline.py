"""A backward pass that overlaps communication with compute, traced.

    mpiexec -n 2 python examples/overlap_timeline.py [--trace trace.json] [--png timeline.png]

Each step computes eight "layers" (matrix products) from the last to the first; each layer's
gradient is submitted with allreduce_async the moment it exists, so it travels while the next
layer computes. Rank 0 then prints the timeline summary (how much communication was hidden
behind compute) and draws the picture.
"""
import argparse
import os

# One BLAS thread per rank, as MPI jobs usually run: the ranks already fill the cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import hvlite as hvd  # noqa: E402
from hvlite.timeline import report  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trace", default="overlap_trace.json")
    p.add_argument("--png", default=None)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    hvd.init()
    rng = np.random.default_rng(hvd.rank())
    layers = [rng.standard_normal((384, 384)).astype(np.float32) for _ in range(8)]
    x = rng.standard_normal((256, 384)).astype(np.float32)
    hvd.start_timeline(args.trace)
    for step in range(args.steps):
        handles = []
        with hvd.timeline.span(f"forward/{step}"):
            acts = [x]
            for w in layers:
                acts.append(np.tanh(acts[-1] @ w))
        for i in reversed(range(len(layers))):
            with hvd.timeline.span(f"backward/layer{i}"):
                grad = acts[i].T @ acts[i + 1]          # stand-in for the real gradient
                for _ in range(3):
                    grad = grad @ layers[i] * 1e-3
            handles.append(hvd.allreduce_async(grad, name=f"layer{i}.w"))
        with hvd.timeline.span(f"update/{step}"):
            for i, h in zip(reversed(range(len(layers))), handles):
                layers[i] -= 1e-3 * h.synchronize()
    hvd.stop_timeline()
    if hvd.rank() == 0:
        events = report.load(args.trace)
        print(report.summary_text(events, top=8))
        if args.png:
            from hvlite.timeline.plot import plot
            plot(events, args.png, title=f"{hvd.size()} ranks: compute and communication")
            print(f"wrote {args.png}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
