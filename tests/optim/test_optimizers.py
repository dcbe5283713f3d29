"""The plain optimizers against their textbook formulas, one process."""
import numpy as np
import pytest

from hvlite.optim import LAMB, LARS, SGD, Adam, scaled_lr, warmup_lr


def run(opt, steps=3):
    p = {"w": np.array([1.0, -2.0, 3.0])}
    grads = [np.array([0.5, 0.1, -0.2]) * (k + 1) for k in range(steps)]
    for g in grads:
        opt.step(p, {"w": g})
    return p["w"], grads


def test_sgd_momentum_matches_formula():
    w, grads = run(SGD(0.1, momentum=0.9))
    ref, buf = np.array([1.0, -2.0, 3.0]), None
    for g in grads:
        buf = g.copy() if buf is None else 0.9 * buf + g
        ref = ref - 0.1 * buf
    np.testing.assert_allclose(w, ref)


def test_adam_matches_formula():
    w, grads = run(Adam(0.01))
    ref, m, v = np.array([1.0, -2.0, 3.0]), 0, 0
    for t, g in enumerate(grads, 1):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        ref = ref - 0.01 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    np.testing.assert_allclose(w, ref)


def test_lars_scales_by_trust_ratio():
    p = {"w": np.array([3.0, 4.0])}
    g = np.array([0.0, 10.0])
    LARS(1.0, momentum=0.0, trust_coefficient=0.01).step(p, {"w": g})
    # ||w|| = 5, ||g|| = 10: step = lr * 0.01 * 5 / 10 * g
    np.testing.assert_allclose(p["w"], [3.0, 4.0 - 0.05])


def test_lamb_step_has_trust_ratio_norm():
    p0 = np.array([3.0, 4.0])
    p = {"w": p0.copy()}
    LAMB(0.1).step(p, {"w": np.array([1.0, 1.0])})
    # first Adam step is ~sign(g) (norm sqrt 2); scaled by ||w|| / ||step|| = 5 / sqrt 2
    assert np.linalg.norm(p["w"] - p0) == pytest.approx(0.1 * 5, rel=1e-6)


def test_state_round_trip_and_bad_lr():
    opt = Adam(0.01)
    run(opt)
    other = Adam(0.5)
    other.load_state_dict(opt.state_dict())
    assert other.lr == 0.01 and other.steps == 3
    np.testing.assert_array_equal(other.state["w"]["m"], opt.state["w"]["m"])
    with pytest.raises(ValueError, match="learning rate"):
        SGD(0)


def test_lr_rules():
    assert scaled_lr(0.1, 8) == pytest.approx(0.8)
    assert warmup_lr(0, 0.1, 0.8, 10) == pytest.approx(0.1)
    assert warmup_lr(5, 0.1, 0.8, 10) == pytest.approx(0.45)
    assert warmup_lr(10, 0.1, 0.8, 10) == pytest.approx(0.8)
