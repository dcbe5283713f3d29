"""hvlite.run.run(): Horovod's horovod.run, a function run on N ranks from a plain process."""
import pytest

import hvlite.run
from run_funcs import fails_on_rank_1, ranked_sum


def test_every_rank_runs_the_function_and_returns_in_rank_order():
    got = hvlite.run.run(ranked_sum, args=(10,), kwargs={"offset": 1}, np=3, timeout=120)
    total = float(sum(r * 10 + 1 for r in range(3)))
    assert got == [(r, 3, total) for r in range(3)], got


def test_a_failing_rank_raises_with_its_error():
    with pytest.raises(hvlite.run.RunError) as info:
        hvlite.run.run(fails_on_rank_1, np=2, timeout=120)
    assert "rank 1 fails on purpose" in str(info.value), info.value


def test_arguments_are_checked():
    with pytest.raises(TypeError):
        hvlite.run.run(42, np=2)
    with pytest.raises(ValueError):
        hvlite.run.run(ranked_sum, np=0)
