"""Rank side: auto's measured picks (tuning/calibrate.pyx) -- each size class tries its candidates in
turn on its first calls, then keeps the fastest, the same on every rank, per process set."""
import json
import os

import numpy as np
import pytest
from mpi4py import MPI

import hvlite as hvd
from hvlite._core.tuning.cost_model import choose_name
from helpers import assert_everywhere

hvd.init(process_sets=[[0, 1]] if MPI.COMM_WORLD.Get_size() > 2 else None)
N, RANK = hvd.size(), hvd.rank()
RT = hvd._current()
ON = os.environ.get("HVLITE_CALIBRATE", "1") != "0"
SIZES = [100, 12345, 64 << 10, (1 << 20) + 4, 5 << 20]     # bytes, one per size class


def table(process_set_id=0):
    return RT.registry.entries[process_set_id].state.coordinator.calibration()


def ran(nbytes, name):
    x = np.full(max(1, nbytes // 4), RANK + 1, np.float32)
    h = hvd.allreduce_async_(x, op=hvd.Sum, name=name)
    h.wait()
    algo = h._pending.algorithm_used
    hvd.synchronize(h)
    assert np.all(x == N * (N + 1) / 2), (nbytes, x[:4])
    from hvlite._core.codes import ALGORITHMS
    return ALGORITHMS[algo]


def test_each_class_tried_then_kept():
    failures = []
    tried = {n: [ran(n, f"cal.{n}") for _ in range(20)] for n in SIZES}
    measured = table()
    if not ON:
        assert measured == {}
        model = RT.global_state.coordinator.cost_model()
        for n, algos in tried.items():
            want = choose_name(max(1, n // 4) * 4, N, model, nodes=RT.engine.cross_size,
                               local_size=RT.engine.local_size, shm=RT.shm_info["available"])
            if set(algos) != {want} and N > 1:
                failures.append(f"{n} B ran {algos}, the model picks {want}")
        assert_everywhere(failures)
        return
    if N == 1:
        assert measured == {}
        return
    for n in SIZES:
        cls = 1 << max(10, min(24, int(max(1, n // 4) * 4).bit_length() - 1))
        entry = measured.get(cls)
        if entry is None:
            failures.append(f"{n} B: class {cls} not measured after 20 calls: {sorted(measured)}")
            continue
        secs = entry["seconds"]
        if secs:            # a lone candidate is taken without trials
            # each candidate ran three times, in turn, then the pick for good
            k = len(secs)
            if sorted(tried[n][:3 * k]) != sorted(list(secs) * 3):
                failures.append(f"{n} B: trials {tried[n][:3 * k]} for candidates {secs}")
            # the fastest, or one within 10% of it that the model ranks first
            if entry["pick"] not in secs or secs[entry["pick"]] > 1.10 * min(secs.values()):
                failures.append(f"class {cls}: picked {entry['pick']}, measured {secs}")
        after = tried[n][3 * len(secs):]
        if any(a != entry["pick"] for a in after):
            failures.append(f"{n} B ran {after} after its trials; the pick is {entry['pick']}")
    if RANK == 0:                       # what test_debug_names_what_was_measured compares with
        print("calibration table: " + json.dumps(measured), flush=True)
    # picks and times are agreed (the slowest rank's): the same bits everywhere
    everyone = MPI.COMM_WORLD.allgather(table())
    if any(t != everyone[0] for t in everyone):
        failures.append(f"tables differ between ranks: {everyone}")
    assert_everywhere(failures)


def test_in_place_and_out_of_place_classes_agree_across_ranks():
    """Calls whose output is apart from their input are timed in classes of their own. Rank 0
    reduces in place where the others do not (legal: the results are the same): every rank
    still resolves each call alike (a mismatch would hang or garble), and the classes of the
    calls in place elsewhere are left alone."""
    before = table()
    failures = []
    for n in (300 << 10, 3 << 20):
        for k in range(16):
            x = np.full(n // 4, RANK + k, np.float32)
            got = (hvd.allreduce_(x, op=hvd.Sum, name=f"cal.mix.{n}") if RANK == 0 else
                   hvd.allreduce(x, op=hvd.Sum, name=f"cal.mix.{n}"))
            if not np.all(got == N * k + N * (N - 1) / 2):
                failures.append(f"{n} B call {k}: {got[:3]}")
                break
    apart = RT.global_state.coordinator.calibration(out_of_place=True)
    if ON and N > 1 and not {1 << 18, 1 << 21} <= set(apart):
        failures.append(f"out-of-place classes not measured: {apart}")
    if table() != before:
        failures.append(f"the in-place classes changed: {before} -> {table()}")
    everyone = MPI.COMM_WORLD.allgather(apart)
    if any(t != everyone[0] for t in everyone):
        failures.append(f"out-of-place tables differ between ranks: {everyone}")
    assert_everywhere(failures)


@pytest.mark.skipif(MPI.COMM_WORLD.Get_size() <= 2, reason="needs a set smaller than the job")
def test_a_process_set_measures_for_itself():
    before = table()
    ps = RT.registry.sets()[1]
    if RANK in ps.ranks:
        for _ in range(20):
            x = np.ones(300 << 10, np.float32)
            hvd.allreduce_(x, op=hvd.Sum, name="cal.set", process_set=ps)
            assert np.all(x == 2)
        got = table(ps.process_set_id)
        assert (got != {}) == ON, got
    assert table() == before            # the global set measured nothing for it
    hvd.barrier()
