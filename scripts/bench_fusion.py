"""One training step's gradients through hvlite's coordinator, against MPI schedules, in one run.

    mpiexec -n 2 python scripts/bench_fusion.py [--steps 30]

The step: 200 float32 tensors of 16 KiB and 20 of 1 MiB (23 MB), each submitted as soon as it
is "ready" (all at once here), then all synchronized. Schedules, interleaved in a random order
each repetition so the machine's drift hits them alike:
  hvlite-fused     allreduce_async per tensor, fusion on (HVLITE_FUSION_THRESHOLD, 64 MiB)
  hvlite-fused-inplace  the same with allreduce_async_ on persistent buffers, as DistributedOptimizer
                   and Horovod's torch optimizer do (out of place, every step's fresh outputs are
                   page-faulted in: ~3 ms of this step on 2 ranks; the MPI schedules reuse theirs)
  hvlite-unfused   the same with fusion off (every tensor its own all-reduce)
  mpi-iallreduce   MPI_Iallreduce per tensor, then MPI_Waitall
  mpi-flat         copy all tensors into one buffer, one MPI_Allreduce, copy back out
  hvlite-timeline  hvlite-fused with the timeline recording (--timeline PATH; the writer
                   thread formats and writes in the background as in a real job)
Also: the coordinator's negotiation time per round with cache hits, and the latency of one
synchronous 4 KiB / 64 KiB allreduce through the coordinator beside MPI_Allreduce.
"""
import argparse
import time

import numpy as np

import hvlite as hvd
from hvlite._core.codes import ALGORITHMS

SMALL, LARGE = (200, 4096), (20, 262144)      # (count, float32 elements)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=30, help="repetitions of each schedule")
    p.add_argument("--timeline", default=None, help="also time fused steps with a timeline here")
    p.add_argument("--autotune", action="store_true",
                   help="instead: sweep fixed (fusion threshold, cycle time) settings, then let "
                        "autotune choose, and compare")
    args = p.parse_args()
    hvd.init()
    rt = hvd._current()
    MPI, comm, rank, n = rt.MPI, rt.comm, hvd.rank(), hvd.size()
    coord = rt.global_state.coordinator
    grads = ([np.full(SMALL[1], 1.0 + i, np.float32) for i in range(SMALL[0])] +
             [np.full(LARGE[1], 1.0 + i, np.float32) for i in range(LARGE[0])])
    outs = [np.empty_like(g) for g in grads]
    flat = np.empty(sum(g.size for g in grads), np.float32)
    total_bytes = flat.nbytes
    threshold = rt.settings.fusion_threshold

    def hvlite_step(fused, inplace=False):
        coord.configure(fusion_threshold=threshold if fused else 0)
        start = hvd.allreduce_async_ if inplace else hvd.allreduce_async
        hs = [start(g if not inplace else o, op=hvd.Sum, name=f"g{i}")
              for i, (g, o) in enumerate(zip(grads, outs))]
        for h in hs:
            h.synchronize()

    def mpi_iallreduce():
        reqs = [comm.Iallreduce(g, o, op=MPI.SUM) for g, o in zip(grads, outs)]
        MPI.Request.Waitall(reqs)

    def mpi_flat():
        off = 0
        for g in grads:
            flat[off:off + g.size] = g
            off += g.size
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        off = 0
        for o in outs:
            o[...] = flat[off:off + o.size]
            off += o.size

    def traced_step():
        writer.pause(False)
        hvlite_step(True)
        writer.pause(True)

    if args.autotune:
        return autotune_vs_sweep(args, rt, grads, hvlite_step)

    schedules = {"hvlite-fused": lambda: hvlite_step(True),
                 "hvlite-fused-inplace": lambda: hvlite_step(True, inplace=True),
                 "hvlite-unfused": lambda: hvlite_step(False),
                 "mpi-iallreduce": mpi_iallreduce, "mpi-flat": mpi_flat}
    if args.timeline:
        hvd.start_timeline(args.timeline)
        writer = rt.timeline.writer if rt.timeline.active else None
        if writer is None:                         # ranks other than 0 record nothing
            class _Off:
                def pause(self, paused):
                    pass
            writer = _Off()
        writer.pause(True)
        schedules["hvlite-timeline"] = traced_step
    names = list(schedules)
    for s in names:                               # warm-up: fills the response cache too
        comm.Barrier()
        schedules[s]()
    times = {s: [] for s in names}
    order = np.random.default_rng(1)
    fused_rounds, fused_neg, fused_own = 0, 0.0, 0.0
    for _ in range(args.steps):
        for j in order.permutation(len(names)):
            s = names[j]
            comm.Barrier()
            before = coord.stats()
            t0 = time.perf_counter()
            schedules[s]()
            times[s].append(time.perf_counter() - t0)
            if s == "hvlite-fused":
                after = coord.stats()
                fused_rounds += after["rounds"] - before["rounds"]
                fused_neg += after["negotiate_seconds"] - before["negotiate_seconds"]
                fused_own += after["own_seconds"] - before["own_seconds"]
    coord.configure(fusion_threshold=threshold)
    if args.timeline:
        hvd.stop_timeline()
    med = {s: comm.allreduce(float(np.median(t)), op=MPI.MAX) for s, t in times.items()}
    best_mpi = min(med["mpi-iallreduce"], med["mpi-flat"])

    # latency of one synchronous allreduce through the coordinator, against MPI_Allreduce
    lat = {}
    for nbytes in (4 << 10, 64 << 10):
        x = np.zeros(nbytes // 4, np.float32)
        hv, mp = [], []
        for _ in range(300):
            comm.Barrier()
            t0 = time.perf_counter()
            hvd.allreduce_(x, op=hvd.Sum, name="lat")
            hv.append(time.perf_counter() - t0)
            comm.Barrier()
            t0 = time.perf_counter()
            rt.engine.allreduce(x, 2, 0, ALGORITHMS.code("mpi"), False)
            mp.append(time.perf_counter() - t0)
        lat[nbytes] = (comm.allreduce(float(np.median(hv)), op=MPI.MAX),
                       comm.allreduce(float(np.median(mp)), op=MPI.MAX))

    if rank == 0:
        print(f"# one step: {SMALL[0]} x 16 KiB + {LARGE[0]} x 1 MiB float32 = "
              f"{total_bytes / 1e6:.1f} MB; {n} ranks; {hvd.mpi_thread_level()}; "
              f"median of {args.steps}")
        print(f"{'schedule':>16} | {'steps/s':>8} | {'vs best MPI':>11}")
        for s in names:
            print(f"{s:>16} | {1 / med[s]:8.1f} | {best_mpi / med[s]:10.2f}x")
        rounds = fused_rounds / args.steps
        if args.timeline:
            print(f"# timeline overhead: fused steps {med['hvlite-timeline'] / med['hvlite-fused'] - 1:+.1%} "
                  f"slower with the timeline on (trace: {args.timeline})")
        print(f"# coordinator, fused steps (220 tensors, cache hits): {rounds:.1f} rounds/step; "
              f"its own work {fused_own / max(fused_rounds, 1) * 1e6:.1f} us per round "
              f"({fused_own / args.steps * 1e6:.1f} us per step); with MPI waits for the other "
              f"ranks {fused_neg / max(fused_rounds, 1) * 1e6:.0f} us per round")
        for nbytes, (h, m) in lat.items():
            print(f"# sync allreduce {nbytes >> 10} KiB: hvlite {h * 1e6:.1f} us, "
                  f"MPI_Allreduce {m * 1e6:.1f} us ({h / m:.1f}x)")
    hvd.shutdown()


def autotune_vs_sweep(args, rt, grads, hvlite_step):
    """Steps/s for every fixed setting of autotune's grid, then with autotune's own choice."""
    MPI, comm, coord = rt.MPI, rt.comm, rt.global_state.coordinator
    thresholds = (1 << 20, 4 << 20, 16 << 20, 64 << 20)
    cycles = (0.25, 1.0, 2.5, 5.0)

    def rate(steps):
        times = []
        for _ in range(steps):
            comm.Barrier()
            t0 = time.perf_counter()
            hvlite_step(True)
            times.append(time.perf_counter() - t0)
        return 1.0 / comm.allreduce(float(np.median(times)), op=MPI.MAX)

    hvlite_step(True)
    sweep = {}
    for t in thresholds:
        for c in cycles:
            comm.Barrier()
            coord.configure(fusion_threshold=t, cycle_time=c / 1000.0)
            hvlite_step(True)
            sweep[(t, c)] = rate(args.steps)
    comm.Barrier()
    coord.autotune(thresholds, cycles)
    steps_to_freeze, frozen = 0, False
    while not frozen:
        hvlite_step(True)
        steps_to_freeze += 1
        frozen = comm.bcast(coord.autotune_state()["frozen"] if comm.Get_rank() == 0 else None)
    for _ in range(3):                      # the frozen setting takes effect in the next round
        hvlite_step(True)
    state = comm.bcast(coord.autotune_state() if comm.Get_rank() == 0 else None)
    chosen = (state["fusion_threshold"], state["cycle_time_ms"])
    best = max(sweep, key=sweep.get)
    # The sweep's best is the maximum of 16 noisy figures, biased upward; compare the two settings
    # again, alternating, in the same stretch of time.
    again = {"best fixed": [], "autotuned": []}
    for _ in range(4):
        for label, (t, c) in (("best fixed", best), ("autotuned", chosen)):
            comm.Barrier()
            coord.configure(fusion_threshold=t, cycle_time=c / 1000.0)
            hvlite_step(True)
            again[label].append(rate(args.steps))
    fixed_rate, tuned = float(np.median(again["best fixed"])), float(np.median(again["autotuned"]))
    if comm.Get_rank() == 0:
        print(f"# autotune against a sweep of fixed settings: {comm.Get_size()} ranks, "
              f"median of {args.steps} steps each")
        print(f"{'fusion threshold':>17} | " + " | ".join(f"{c:>6} ms" for c in cycles))
        for t in thresholds:
            print(f"{t >> 20:>13} MiB | " + " | ".join(f"{sweep[(t, c)]:9.1f}" for c in cycles))
        print(f"# best fixed: {best[0] >> 20} MiB, {best[1]} ms: {sweep[best]:.1f} steps/s")
        print(f"# autotune: froze after {steps_to_freeze} steps on {chosen[0] >> 20} MiB, {chosen[1]:g} ms")
        print(f"# measured again, alternating, median of 4 x {args.steps} steps: best fixed "
              f"{fixed_rate:.1f} steps/s, autotuned {tuned:.1f} steps/s = {tuned / fixed_rate:.1%}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
