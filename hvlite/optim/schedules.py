"""Learning-rate scaling for data-parallel training (Goyal et al. 2017): with N ranks the global
batch is N times larger, so scale the rate by N, and ramp up to it over the first steps."""


def scaled_lr(base_lr, size):
    """The linear scaling rule: base_lr * number of ranks."""
    return base_lr * size


def warmup_lr(step, base_lr, target_lr, warmup_steps):
    """Linear warm-up from base_lr at step 0 to target_lr at warmup_steps, constant after."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return target_lr
    return base_lr + (target_lr - base_lr) * step / warmup_steps
