"""Rank side: the parameter server's modes against NumPy references (servers are the last rank)."""
import os
import time

import numpy as np
import pytest

import hvlite.ps as ps
from helpers import assert_everywhere
from hvlite.errors import ConfigError
from hvlite.optim import SGD, Adam
from mpi4py import MPI

COMM = MPI.COMM_WORLD
N, RANK = COMM.Get_size(), COMM.Get_rank()
S = int(os.environ.get("PS_TEST_SERVERS", "1"))
W = N - S
RNG = np.random.default_rng(0)
X = RNG.standard_normal((W * 8 * 6, 5))
Y = RNG.integers(0, 3, len(X))


def init_params(seed=1):
    r = np.random.default_rng(seed)
    return {"w": r.standard_normal((5, 3)), "b": np.zeros(3)}


def grads(params, x, y):
    z = x @ params["w"] + params["b"]
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    p /= len(y)
    return {"b": p.sum(axis=0), "w": x.T @ p}


def everywhere(failures):
    """assert_everywhere over COMM_WORLD (hvlite itself is not initialized here)."""
    allf = COMM.allgather(failures)
    bad = [f"rank {r}: {f}" for r, fs in enumerate(allf) for f in fs]
    assert not bad, "\n".join(bad)


def train(make_opt, mode, staleness=None, steps=6, slow=0.0, seed=1):
    """Run a job; workers return their final params, every rank the stats."""
    params = init_params(seed + RANK * (RANK < W))     # worker 0's values must win
    job = ps.init(params, make_opt(), mode=mode, staleness=staleness, servers=S)
    if job.is_server:
        stats = job.serve()
        return None, stats
    for step in range(steps):
        p = job.pull()
        rows = slice((step * W + RANK) * 8, (step * W + RANK + 1) * 8)
        if slow and RANK == 0:
            time.sleep(slow)
        job.push(grads(p, X[rows], Y[rows]))
    stats = job.close()
    return params, stats


def reference(make_opt, steps=6, seed=1):
    """All-reduce training: every worker's gradient averaged, one optimizer step per step."""
    params, opt = init_params(seed), make_opt()
    for step in range(steps):
        gs = [grads(params, X[(step * W + w) * 8:(step * W + w + 1) * 8],
                    Y[(step * W + w) * 8:(step * W + w + 1) * 8]) for w in range(W)]
        opt.step(params, {k: sum(g[k] for g in gs) / W for k in params})
    return params


@pytest.mark.parametrize("make", [lambda: SGD(0.5, momentum=0.9), lambda: Adam(0.05)],
                         ids=["sgd-momentum", "adam"])
def test_sync_equals_allreduce_training(make):
    params, stats = train(make, "sync")
    failures = []
    if params is not None:
        ref = reference(make)
        for k in ref:
            if not np.allclose(params[k], ref[k], rtol=1e-10, atol=1e-12):
                failures.append(f"{k}: {params[k]} vs all-reduce {ref[k]}")
        if np.allclose(params["w"], init_params()["w"]):
            failures.append("parameters never changed")
    if stats["staleness"] != {0: W * 6 * S} or stats["updates"] != [6] * S:
        failures.append(f"sync stats {stats['staleness']} {stats['updates']}")
    everywhere(failures)


def test_ssp_zero_equals_sync():
    make = lambda: SGD(0.5, momentum=0.9)       # noqa: E731
    a, _ = train(make, "sync", slow=0.01)
    b, stats = train(make, "ssp", staleness=0, slow=0.01)
    failures = []
    if a is not None:
        for k in a:
            if a[k].tobytes() != b[k].tobytes():
                failures.append(f"{k}: ssp k=0 {b[k]} vs sync {a[k]}")
    if stats["max_staleness"] != 0:
        failures.append(f"ssp k=0 applied staleness {stats['staleness']}")
    everywhere(failures)


@pytest.mark.parametrize("k", [1, 2])
def test_ssp_never_staler_than_k_under_a_slow_rank(k):
    _, stats = train(lambda: SGD(0.1), "ssp", staleness=k, steps=12, slow=0.03)
    failures = []
    hist = stats["staleness"]
    if max(hist) > k:
        failures.append(f"staleness above k={k}: {hist}")
    if W > 1 and max(hist) == 0:
        failures.append(f"a slow rank should make some gradients stale: {hist}")
    if sum(hist.values()) != W * 12 * S:
        failures.append(f"{sum(hist.values())} gradients applied, expected {W * 12 * S}")
    everywhere(failures)


def test_close_drains_pushes_in_flight():
    """Pushes straight into close(): every one is applied before the servers stop."""
    steps = 5
    params = {"w": np.zeros(7), "b": np.zeros(3)}
    job = ps.init(params, SGD(1.0), mode="async", servers=S)
    if job.is_server:
        stats = job.serve()
    else:
        for step in range(steps):
            job.push({"w": np.full(7, float(RANK + 1)), "b": np.full(3, float(step))})
        stats = job.close()
    failures = []
    if job.is_worker:
        want_w = -steps * sum(r + 1 for r in range(W)) / W
        want_b = -W * sum(range(steps)) / W
        if not (np.allclose(params["w"], want_w) and np.allclose(params["b"], want_b)):
            failures.append(f"final {params}, expected w={want_w} b={want_b}")
    if stats["pushes"] != W * steps * S:
        failures.append(f"{stats['pushes']} pushes applied, expected {W * steps * S}")
    everywhere(failures)


@pytest.mark.parametrize("kw, words", [
    ({"mode": "bsp"}, "unknown mode 'bsp'"),
    ({"mode": "ssp", "staleness": -1}, "staleness must be an integer >= 0"),
    ({"mode": "sync", "servers": N}, f"{N} server(s) on {N} rank(s)"),
])
def test_bad_settings_are_named_errors_on_every_rank(kw, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        ps.init(init_params(), SGD(0.1), **kw)


def test_a_short_message_is_refused_not_read_as_data():
    """A message shorter than the buffer it lands in (a damaged or mistaken peer) is an error
    naming the sender, never the buffer's old bytes read as a gradient or parameters."""
    from hvlite._core.ps import Link
    comm = MPI.COMM_WORLD.Dup()
    link = Link(comm, 30.0)
    failures = []
    if comm.rank == 1:
        link.isend(np.ones(2, np.float32), 0, 12)
        link.isend(np.ones(4, np.float32), 0, 13)
        link.isend(np.ones(1, np.float32), 0, 14)
        link.drain()
    elif comm.rank == 0:
        for tag, recv in ((12, lambda b: link.recv(b, 1, 12)),
                          (14, lambda b: link.recv_all([b], [1], 14))):
            buf = np.full(4, -1.0, np.float32)
            try:
                recv(buf)
                failures.append(f"tag {tag}: a short message was taken: {buf}")
            except ValueError as e:
                if f"rank 1 sent {4 if tag == 14 else 8} bytes (tag {tag}) where 16" not in str(e):
                    failures.append(f"tag {tag}: {e}")
        whole = np.zeros(4, np.float32)
        link.recv(whole, 1, 13)                     # a whole message still arrives
        if not np.array_equal(whole, np.ones(4, np.float32)):
            failures.append(f"a whole message read {whole}")
    comm.Barrier()
    comm.Free()
    assert_everywhere(failures)
