"""The fuzzer: a quick seed set under mpiexec (`make fuzz` runs the long one), and proof that it
can fail: its checker on right and corrupted results in-process, a wrong result and a stall
injected into a real run, and the launch verdicts of `make fuzz`."""
import collections

import numpy as np
import pytest

import fuzzlib
import run_fuzz

ALGORITHMS = ["ring", "rhd", "rd", "tree", "hierarchical", "shm", "mpi", "auto", None]
SETS = {2: [[0, 1], [0], [1]], 3: [[0, 1, 2], [0, 1], [1], [0, 2]],
        4: [[0, 1, 2, 3], [0, 1, 2], [1, 3], [0, 3]]}

# (ranks, seeds, settings): about 20 s in all on 2 busy cores
QUICK = [(2, "1-8", "default"), (3, "1-4", "default"), (3, "5-8", "nodes-of-2"),
         (3, "9-10", "small-segments")]


@pytest.mark.parametrize("n,seeds,variant", QUICK, ids=lambda v: str(v))
def test_quick_seeds(mpirun, n, seeds, variant):
    out = mpirun(n, "tests/fuzz/mpi_fuzz.py", "--seeds", seeds, "--ops", "150",
                 pytest_module=False, env=run_fuzz.VARIANTS[variant], timeout=150)
    lines = run_fuzz.fuzz_lines(out)
    lo, hi = map(int, seeds.split("-"))
    count = (hi - lo + 1) * 150
    assert sorted(lines) == list(range(n)), out
    assert all(ops == count and ran > 0 and m == 0 for ops, ran, m in lines.values()), out
    assert run_fuzz.classify(n, 0, out) == ("ok", count, 0)


def test_injected_wrong_result_is_reported(mpirun):
    """The last rank's result of op 8 (an allreduce on every rank) is corrupted before the
    checks: it fails against NumPy there, and the bits differ across ranks; every rank counts
    one mismatch, the job exits 1, and the report says how to replay it."""
    with pytest.raises(pytest.fail.Exception) as failed:
        mpirun(3, "tests/fuzz/mpi_fuzz.py", "--seeds", "1", "--ops", "20", "--inject",
               "corrupt:8", pytest_module=False, timeout=90)
    out = str(failed.value)
    assert "exited 1" in out and "MISMATCH seed=1 op=8 rank=2: op 8 allreduce" in out, out
    assert "differ bitwise" in out and "ranks hold different bits" in out, out
    assert "--seed 1 --only 8" in out, out
    assert {m for _, _, m in run_fuzz.fuzz_lines(out).values()} == {1}, out


def test_injected_stall_is_reported_as_a_hang(mpirun):
    with pytest.raises(pytest.fail.Exception) as failed:
        mpirun(2, "tests/fuzz/mpi_fuzz.py", "--seeds", "1", "--ops", "20", "--inject",
               "stall:3", "--watchdog", "2", pytest_module=False, timeout=60)
    out = str(failed.value)
    assert "HANG rank=" in out and "seed=1 op=3" in out, out
    assert run_fuzz.classify(2, 3, out)[0] == "hang"


@pytest.mark.parametrize("n", [2, 3, 4])
def test_checker_accepts_right_results_and_rejects_corrupted_ones(n):
    """Every kind, as every member rank would see it: the reference passes, and one changed
    element (or shape, split, part, object) fails."""
    sets = SETS[n]
    kinds = collections.Counter()
    for seed in (1, 2):
        for batch in fuzzlib.draw_plan(seed, 120, sets, ALGORITHMS):
            for op in batch:
                for me in sets[op["set"]]:
                    right = fuzzlib.right_result(seed, op, sets, me)
                    assert fuzzlib.check(seed, op, sets, me, right) == [], \
                        fuzzlib.describe(op, sets)
                    wrong = fuzzlib.corrupt(op, right)
                    assert fuzzlib.check(seed, op, sets, me, wrong), fuzzlib.describe(op, sets)
                kinds[op["kind"]] += 1
    assert set(kinds) == set(fuzzlib.KINDS), kinds


def test_checker_rejects_a_wrong_reduction_and_follows_the_rule():
    """Not only corrupted bits: a Sum where an Average was due fails, and so does an integer
    Average rounded down instead of toward zero; for Min(+0, -0), where NumPy's answer depends
    on the argument order, the reference is the rule's -0 in either order."""
    sets = SETS[2]
    op = {"i": 0, "kind": "allreduce", "set": 0, "mode": "sync", "name": None,
          "op": fuzzlib.AVERAGE, "algorithm": None, "dtype": "int32", "layout": "c",
          "shape": (7,), "fill": "small"}
    inputs = [fuzzlib.rank_input(5, op, r, 0, sets) for r in (0, 1)]
    total = inputs[0] + inputs[1]
    assert fuzzlib.check(5, op, sets, 0, total)
    assert fuzzlib.check(5, op, sets, 0, total // 2)                # rounds down, not to zero
    assert fuzzlib.check(5, op, sets, 0, np.sign(total) * (np.abs(total) // 2)) == []
    plus, minus = np.zeros(1, np.float32), -np.zeros(1, np.float32)
    numpy = {np.minimum(plus, minus).tobytes(), np.minimum(minus, plus).tobytes()}
    rule = {fuzzlib.reduction(pair, "float32", fuzzlib.MIN, "special")[0].tobytes()
            for pair in ([plus, minus], [minus, plus])}
    assert numpy == {plus.tobytes(), minus.tobytes()} and rule == {minus.tobytes()}


def test_cross_rank_comparison_catches_different_bits():
    ops = {3: {"i": 3, "kind": "allreduce", "set": 0}, 4: {"i": 4, "kind": "allgather", "set": 0}}
    same = [{3: "a", 4: "b"}, {3: "a", 4: "b"}, {4: "b"}]
    assert fuzzlib.cross_rank_problems(same, SETS[3], ops) == []
    differ = [{3: "a", 4: "b"}, {3: "a", 4: "c"}, {4: "b"}]
    assert [i for i, _ in fuzzlib.cross_rank_problems(differ, SETS[3], ops)] == [4]


def test_plan_is_the_same_everywhere_and_covers_the_api():
    """The plan depends on the seed alone (every rank draws it), a shorter run is a prefix of a
    longer one (so `--ops I+1` replays up to op I), and over a few seeds it draws every kind,
    dtype, op, algorithm, fill, layout, set, name form and shape class."""
    flat = lambda plan: [op for batch in plan for op in batch]  # noqa: E731
    a = flat(fuzzlib.draw_plan(9, 200, SETS[3], ALGORITHMS))
    assert a == flat(fuzzlib.draw_plan(9, 200, SETS[3], ALGORITHMS))
    assert flat(fuzzlib.draw_plan(9, 57, SETS[3], ALGORITHMS)) == a[:57]
    seen = collections.defaultdict(set)
    for seed in range(1, 11):
        for op in flat(fuzzlib.draw_plan(seed, 200, SETS[3], ALGORITHMS)):
            parts = op.get("parts", [op]) if op["kind"] == "grouped" else [op]
            seen["kind"].add(op["kind"])
            seen["set"].add(op["set"])
            seen["mode"].add(op["mode"])
            seen["name"].add(op["name"] if not op["name"] else op["name"].split(".")[0])
            if "op" in op:
                seen["op"].add(op["op"])
            if "algorithm" in op:
                seen["algorithm"].add(op["algorithm"])
            if op["kind"] == "grouped":
                seen["parts"].add(len(op["parts"]))
            if op["kind"] == "alltoall":
                seen["splits"].add(op["splits"] is None)
            for part in parts:
                if "dtype" in part:
                    seen["dtype"].add(part["dtype"])
                    seen["fill"].add(part["fill"])
                    seen["layout"].add(part["layout"])
                if "shape" in part:
                    s = part["shape"]
                    seen["shape"].add("scalar" if s == () else "empty" if 0 in s else
                                      "big" if np.prod(s) > 65536 else f"{len(s)}-d")
    assert seen["kind"] == set(fuzzlib.KINDS)
    assert seen["dtype"] == set(fuzzlib.DTYPE_NAMES) and len(seen["dtype"]) == 12
    assert seen["op"] == set(fuzzlib.OPS) and seen["algorithm"] == set(ALGORITHMS)
    assert seen["fill"] == {"small", "wide", "random", "special", "bits"}
    assert seen["layout"] == {"c", "strided", "fortran", "readonly"}
    assert seen["set"] == set(range(len(SETS[3]))) and seen["mode"] == {"sync", "async", "drop"}
    assert seen["name"] == {None, "", "pool", "fz"} and seen["splits"] == {True, False}
    assert seen["shape"] == {"scalar", "empty", "big", "1-d", "2-d", "3-d"}
    assert 0 in seen["parts"] and 4 in seen["parts"]


def test_launch_verdicts():
    ok = "[0] FUZZ rank=0 seeds=1-2 ops=400 ran=380 mismatches=0 seconds=1.0FUZZ rank=1 " \
         "seeds=1-2 ops=400 ran=371 mismatches=0 seconds=1.0\n"
    assert run_fuzz.classify(2, 0, ok) == ("ok", 400, 0)
    bad = ok.replace("mismatches=0", "mismatches=2")
    assert run_fuzz.classify(2, 1, bad) == ("mismatch", 400, 2)
    assert run_fuzz.classify(2, None, "")[0] == "hang"
    assert run_fuzz.classify(2, 3, "HANG rank=1 seed=1 op=3 (submitting)")[0] == "hang"
    assert run_fuzz.classify(2, 139, "Segmentation fault")[0] == "crash"
    assert run_fuzz.classify(3, 0, ok)[0] == "crash"        # a rank's line is missing
    assert run_fuzz.classify(2, 0, bad)[0] == "crash"       # mismatches, yet exit 0

def test_a_dropped_pool_name_is_not_drawn_again():
    """A dropped handle's request may still be in flight at any later op, and its name submitted
    again meanwhile is refused (Horovod's rule), so the plan never draws it again. Seed 12 at 2
    ranks once dropped pool.2 in one batch and drew it again in the next: a DuplicateNameError
    whenever the dropped all-reduce had not completed yet."""
    dropped_seen = 0
    for seed in range(1, 41):
        dropped = set()
        for batch in fuzzlib.draw_plan(seed, 200, SETS[2], ALGORITHMS):
            for op in batch:
                key = (op["set"], op["name"])
                if op["name"] and op["name"].startswith("pool."):
                    assert key not in dropped, (seed, op["i"], op["name"])
                    if op["mode"] == "drop":
                        dropped.add(key)
                        dropped_seen += 1
    assert dropped_seen > 10        # the plans do drop pool names
