"""hvlite.ps under mpiexec: modes against all-reduce training, the staleness bound, draining,
failures that end every rank, and the digits example in each mode."""
import importlib.util
import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

from hvlite.errors import ConfigError
from hvlite.ps import check_settings


@pytest.mark.parametrize("n, servers", [(2, 1), (3, 1), (4, 2)])
def test_ps(mpirun, n, servers):
    mpirun(n, "tests/ps/mpi_ps.py", env={"PS_TEST_SERVERS": str(servers)}, timeout=120)


@pytest.mark.parametrize("how, words", [
    ("worker", ["worker rank 1 failed: ValueError: bad batch on purpose"]),
    ("server", ["server rank 3 failed: FloatingPointError: optimizer blew up at step 3"]),
    ("server-exit", []),
])
def test_a_failing_rank_ends_every_rank(mpirun, how, words):
    with pytest.raises(pytest.fail.Exception) as info:
        mpirun(4, "tests/ps/ps_fail.py", how, pytest_module=False, timeout=60)
    out = str(info.value)
    assert "exited" in out and "hung" not in out, out     # it failed, and not by the timeout
    assert "finished normally" not in out, out
    for w in words:
        # the failing rank and every other rank print it (workers from the server's message)
        assert out.count(w) >= 3, out


def test_bad_settings_are_named():
    with pytest.raises(ConfigError, match="unknown mode 'bsp'"):
        check_settings("bsp", None, 1, 4)
    with pytest.raises(ConfigError, match="staleness must be an integer >= 0, got -1"):
        check_settings("ssp", -1, 1, 4)
    with pytest.raises(ConfigError, match="needs staleness"):
        check_settings("ssp", None, 1, 4)
    with pytest.raises(ConfigError, match="applies to mode='ssp' only"):
        check_settings("async", 2, 1, 4)
    with pytest.raises(ConfigError, match="4 server\\(s\\) on 4 rank\\(s\\) leaves no worker"):
        check_settings("sync", None, 4, 4)
    with pytest.raises(ConfigError, match="servers must be a positive integer"):
        check_settings("sync", None, 0, 4)


def test_digits_example_async_converges(mpirun):
    out = mpirun(3, "examples/train_digits.py", "--epochs", "10", "--mode", "ps-async",
                 pytest_module=False, timeout=120)
    acc = float(out.split("test accuracy ")[1].split("%")[0])
    assert acc >= 90.0 and "identical on every worker: True" in out, out


def test_digits_example_ssp_with_a_straggler_stays_within_k(mpirun):
    out = mpirun(4, "examples/train_digits.py", "--epochs", "4", "--mode", "ssp", "--staleness",
                 "2", "--slow-rank", "1", "--slow-factor", "3", pytest_module=False, timeout=120)
    hist = out.split("staleness histogram {")[1].split("}")[0]
    seen = {int(k): int(v) for k, v in (item.split(": ") for item in hist.split(", "))}
    assert max(seen) <= 2 and sum(seen.values()) == 3 * 4 * 22, out


def test_launcher_passes_servers_and_rejects_too_many():
    from hvlite.run.launcher import LaunchError, parse_args, settings_env
    assert settings_env(parse_args(["-np", "4", "--servers", "1", "python", "x.py"])) == \
        {"HVLITE_PS_SERVERS": "1"}
    for bad in ("4", "0"):
        with pytest.raises(LaunchError, match=f"--servers {bad} with -np 4"):
            parse_args(["-np", "4", "--servers", bad, "python", "x.py"])


def _transient_reference(seed, rank, steps, prob):
    rng = np.random.default_rng([seed, 7919, rank])
    return [s for s in range(steps) if rng.random() < prob]


def test_digits_transient_stragglers_are_the_same_schedule_in_every_mode(mpirun, tmp_path):
    flags = ["--epochs", "1", "--straggler", "transient", "--straggle-prob", "0.3",
             "--slow-factor", "2", "--compute-ms", "1"]
    got = {}
    for mode, n in (("allreduce", 3), ("ps-sync", 4)):
        out = tmp_path / f"{mode}.json"
        mpirun(n, "examples/train_digits.py", "--mode", mode, "--json", str(out), *flags,
               pytest_module=False, timeout=120)
        got[mode] = json.loads(out.read_text())
    want = [_transient_reference(0, rank, 22, 0.3) for rank in range(3)]
    assert all(want) and len(set(map(tuple, want))) == 3       # every worker delayed, differently
    for mode, summary in got.items():
        assert summary["delayed_steps"] == want, mode
        # each step sleeps 1 ms, a slow step 2 ms: busy time counts them all
        assert all(b >= (22 + len(d)) * 1e-3 for b, d in zip(summary["busy_s"], want)), summary


def test_digits_persistent_straggler_is_one_worker_every_step():
    spec = importlib.util.spec_from_file_location("train_digits", os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples", "train_digits.py"))
    digits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(digits)
    args = SimpleNamespace(straggler="persistent", slow_rank=1, slow_factor=1.5, straggle_prob=0.9,
                           compute_ms=0.0, seed=0)
    lags = [digits.Straggler(args, rank) for rank in range(3)]
    for lag in lags:
        for _ in range(5):
            lag.begin()
            lag.end()
    assert [lag.record()["delayed_steps"] for lag in lags] == [[], [0, 1, 2, 3, 4], []]
