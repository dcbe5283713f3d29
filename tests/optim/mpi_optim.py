"""Rank side: data-parallel training is the same training, on every rank."""
import hashlib

import numpy as np
import pytest

import hvlite as hvd
from helpers import adasum_close, adasum_reference, assert_everywhere
from hvlite.optim import (SGD, Adam, DistributedOptimizer, LocalSGD, broadcast_optimizer_state,
                          broadcast_parameters)

hvd.init()
N, RANK = hvd.size(), hvd.rank()
RNG = np.random.default_rng(0)
X = RNG.standard_normal((N * 8 * 3, 5)).astype(np.float64)
Y = RNG.integers(0, 3, len(X))


def init_params(seed=1):
    r = np.random.default_rng(seed)
    return {"w": r.standard_normal((5, 3)), "b": np.zeros(3)}


def grads(params, x, y, report):
    """Softmax regression, mean cross-entropy: report(name, grad) for each parameter."""
    z = x @ params["w"] + params["b"]
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    p /= len(y)
    report("b", p.sum(axis=0))
    report("w", x.T @ p)


def digest(params):
    return hashlib.sha1(b"".join(params[k].tobytes() for k in sorted(params))).hexdigest()


@pytest.mark.parametrize("make", [lambda: SGD(0.5, momentum=0.9), lambda: Adam(0.05)], ids=["sgd", "adam"])
def test_matches_one_process_on_the_whole_batch_and_ranks_stay_identical(make):
    params, ref = init_params(), init_params()
    opt, ref_opt = DistributedOptimizer(make(), params), make()
    failures = []
    for step in range(5):
        batch = slice(step * 8 * N, (step + 1) * 8 * N)
        mine = slice(batch.start + RANK * 8, batch.start + (RANK + 1) * 8)
        grads(params, X[mine], Y[mine], opt.grad_ready)
        opt.step()
        g = {}
        grads(ref, X[batch], Y[batch], g.__setitem__)
        ref_opt.step(ref, g)
        if len(set(hvd.allgather_object(digest(params)))) != 1:
            failures.append(f"step {step}: ranks differ")
        if not all(np.allclose(params[k], ref[k], rtol=1e-10, atol=1e-12) for k in params):
            failures.append(f"step {step}: differs from one process on the whole batch")
    assert_everywhere(failures)


@pytest.mark.parametrize("make", [lambda: SGD(0.5, momentum=0.9), lambda: Adam(0.05)], ids=["sgd", "adam"])
def test_adasum_combines_every_rank_s_own_update(make):
    """op=Adasum (Horovod's Adasum optimizer): each rank steps on its own gradient with its own
    optimizer state, and the parameters move by the Adasum of the ranks' updates."""
    params = init_params()
    opt = DistributedOptimizer(make(), params, op=hvd.Adasum)
    mine = [make() for _ in range(N)]               # every rank's optimizer, rebuilt here
    failures = []
    for step in range(3):
        start = {k: v.copy() for k, v in params.items()}
        rows = [slice((step * N + r) * 8, (step * N + r + 1) * 8) for r in range(N)]
        grads(params, X[rows[RANK]], Y[rows[RANK]], opt.grad_ready)
        opt.step()
        updates = []
        for r in range(N):
            g, moved = {}, {k: v.copy() for k, v in start.items()}
            grads(start, X[rows[r]], Y[rows[r]], g.__setitem__)
            mine[r].step(moved, g)
            updates.append({k: moved[k] - start[k] for k in start})
        for k in params:
            want = start[k] + adasum_reference([u[k] for u in updates])
            if not adasum_close(params[k], want, 4):
                failures.append(f"step {step} {k}: {params[k].ravel()[:3]} vs {want.ravel()[:3]}")
        if len(set(hvd.allgather_object(digest(params)))) != 1:
            failures.append(f"step {step}: ranks differ")
    assert_everywhere(failures)


def test_accumulation_equals_one_big_batch():
    k = 3
    params, ref = init_params(), init_params()
    opt, ref_opt = DistributedOptimizer(SGD(0.3), params, backward_passes_per_step=k), SGD(0.3)
    applied = []
    for micro in range(k):
        rows = slice((RANK * k + micro) * 8, (RANK * k + micro + 1) * 8)
        grads(params, X[rows], Y[rows], opt.grad_ready)
        applied.append(opt.step())
    g = {}
    grads(ref, X[:N * k * 8], Y[:N * k * 8], g.__setitem__)
    ref_opt.step(ref, g)
    ok = applied == [False] * (k - 1) + [True] and all(np.allclose(params[n], ref[n]) for n in params)
    assert_everywhere([] if ok else [f"accumulated {params} vs {ref}, applied {applied}"])


def test_broadcast_parameters_and_optimizer_state():
    params = init_params(seed=100 + RANK)              # different on every rank
    broadcast_parameters(params, root_rank=0)
    failures = []
    if digest(params) != digest(init_params(seed=100)):
        failures.append("parameters are not rank 0's after broadcast")
    opt = Adam(0.01 * (RANK + 1))                      # and so is the optimizer's state
    opt.step(params, {"w": np.full((5, 3), RANK + 1.0), "b": np.ones(3)})
    broadcast_optimizer_state(opt, root_rank=N - 1)
    moments = hvd.allgather_object(opt.state["w"]["m"].tobytes())
    if len(set(moments)) != 1 or opt.lr != pytest.approx(0.01 * N):
        failures.append(f"optimizer state not broadcast (lr {opt.lr})")
    assert_everywhere(failures)


def test_local_sgd_averages_parameters_every_k_steps():
    params = init_params()
    local = LocalSGD(SGD(0.5), params, every=2)
    failures = []
    for step in range(4):
        rows = slice((step * N + RANK) * 8, (step * N + RANK + 1) * 8)
        g = {}
        grads(params, X[rows], Y[rows], g.__setitem__)
        if step % 2 == 1:                             # this step ends with an average
            before = {k: v.copy() for k, v in params.items()}
            SGD(0.5).step(before, g)
            want = {k: np.mean(hvd.allgather_object(before[k]), axis=0) for k in before}
            local.step(g)
            if not all(np.allclose(params[k], want[k]) for k in params):
                failures.append(f"step {step}: not the average")
        else:
            local.step(g)
    assert_everywhere(failures)


def test_bad_reports_are_named():
    opt = DistributedOptimizer(SGD(0.1), init_params())
    with pytest.raises(KeyError, match="nope"):
        opt.grad_ready("nope", np.zeros(3))


def test_a_wrong_shape_on_one_rank_fails_every_rank():
    """The culprit's grad_ready raises ValueError at once; every rank's step() then fails with a
    MismatchError naming the shapes, instead of the others waiting for it."""
    opt = DistributedOptimizer(SGD(0.1), init_params(), prefix="bad.")
    culprit = N - 1
    failures = []
    try:
        opt.grad_ready("b", np.zeros(4 if RANK == culprit else 3))
        if RANK == culprit:
            failures.append("no ValueError on the culprit")
    except ValueError as e:
        if RANK != culprit or "shape" not in str(e):
            failures.append(f"ValueError {e}")
    opt.grad_ready("w", np.zeros((5, 3)))            # the backward pass goes on
    try:
        opt.step()
        if N > 1:
            failures.append("step() succeeded")
    except hvd.MismatchError as e:
        if "bad.b" not in str(e) or "(4,)" not in str(e) or "(3,)" not in str(e):
            failures.append(f"MismatchError {e}")
    except ValueError as e:                          # one rank: nobody to disagree with
        if N > 1 or "wrong shape" not in str(e):
            failures.append(f"ValueError at step {e}")
    assert_everywhere(failures)
