"""Plain optimizers over named NumPy (or CuPy) arrays: params and grads are {name: array}.

They know nothing of ranks; DistributedOptimizer feeds them averaged gradients. State is a
dict of arrays per parameter, so it can be broadcast and restored.
"""
import numpy as np


class Optimizer:
    def __init__(self, lr):
        if not lr > 0:
            raise ValueError(f"learning rate must be positive, got {lr!r}")
        self.lr = float(lr)
        self.state = {}          # name -> {slot: array}
        self.steps = 0

    def step(self, params, grads):
        """Update params in place from grads (names not in grads are left alone)."""
        self.steps += 1
        for name in sorted(grads):
            self.update(name, params[name], grads[name])

    def update(self, name, p, g):
        raise NotImplementedError

    def state_dict(self):
        return {"lr": self.lr, "steps": self.steps,
                "state": {n: {k: v.copy() for k, v in s.items()} for n, s in self.state.items()}}

    def load_state_dict(self, sd):
        self.lr, self.steps = float(sd["lr"]), int(sd["steps"])
        self.state = {n: {k: np.array(v, copy=True) for k, v in s.items()} for n, s in sd["state"].items()}


class SGD(Optimizer):
    """SGD with (optional) momentum and weight decay, as torch.optim.SGD."""

    def __init__(self, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(lr)
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov

    def update(self, name, p, g):
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = self.state.setdefault(name, {}).get("momentum")
            if buf is None:
                buf = self.state[name]["momentum"] = g.copy()
            else:
                buf *= self.momentum
                buf += g
            g = g + self.momentum * buf if self.nesterov else buf
        p -= self.lr * g


class Adam(Optimizer):
    """Adam (Kingma & Ba), bias-corrected, with decoupled weight decay when asked (AdamW)."""

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(lr)
        self.b1, self.b2 = betas
        self.eps, self.weight_decay = eps, weight_decay

    def moments(self, name, p, g):
        s = self.state.setdefault(name, {})
        if "m" not in s:
            s["m"], s["v"], s["t"] = np.zeros_like(p), np.zeros_like(p), np.zeros((), np.int64)
        s["t"] += 1
        s["m"] *= self.b1
        s["m"] += (1 - self.b1) * g
        s["v"] *= self.b2
        s["v"] += (1 - self.b2) * g * g
        t = int(s["t"])
        m_hat = s["m"] / (1 - self.b1 ** t)
        v_hat = s["v"] / (1 - self.b2 ** t)
        return m_hat / (np.sqrt(v_hat) + self.eps)

    def update(self, name, p, g):
        step = self.moments(name, p, g)
        if self.weight_decay:
            step = step + self.weight_decay * p
        p -= self.lr * step


def _trust_ratio(p, update, coef=1.0):
    pn, un = float(np.linalg.norm(p)), float(np.linalg.norm(update))
    return coef * pn / un if pn > 0 and un > 0 else 1.0


class LARS(SGD):
    """Layer-wise adaptive rate scaling (You et al. 2017): each layer's step is scaled by
    trust_coefficient * ||w|| / ||g + wd*w||, then SGD with momentum."""

    def __init__(self, lr, momentum=0.9, weight_decay=0.0, trust_coefficient=0.001):
        super().__init__(lr, momentum, 0.0)
        self.lars_weight_decay, self.trust = weight_decay, trust_coefficient

    def update(self, name, p, g):
        g = g + self.lars_weight_decay * p if self.lars_weight_decay else g
        super().update(name, p, g * _trust_ratio(p, g, self.trust))


class LAMB(Adam):
    """Layer-wise adaptive moments (You et al. 2019): the Adam step, with weight decay, scaled
    per layer by ||w|| / ||step||."""

    def update(self, name, p, g):
        step = self.moments(name, p, g)
        if self.weight_decay:
            step = step + self.weight_decay * p
        p -= self.lr * _trust_ratio(p, step) * step
