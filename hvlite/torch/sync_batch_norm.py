"""SyncBatchNorm: batch normalization over the global batch (every rank's shard together).

The statistics are summed across ranks with the differentiable allreduce, so autograd produces
the exact gradient of batch normalization on the whole batch (the backward allreduces the
matching sums), with no hand-written backward.
"""
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from hvlite.ops import Sum
from hvlite.torch import _bridge as B
from hvlite.torch.mpi_ops import allreduce, global_process_set


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d whose training-mode statistics (mean and
    variance per channel) cover the global batch across the ranks of `process_set`."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm: expected at least 2D input (got {input.dim()}D)")

    def forward(self, input):
        self._check_input_dim(input)
        if not (self.training and B.ps_size(self.process_set) > 1):
            return super().forward(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        dims = [0] + list(range(2, input.dim()))
        shape = [1, -1] + [1] * (input.dim() - 2)
        x = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        count = torch.tensor([x.numel() / x.shape[1]], dtype=x.dtype, device=x.device)
        # Two passes (mean, then centred squares) keep the variance accurate.
        sums = allreduce(torch.cat([count, x.sum(dims)]), op=Sum, process_set=self.process_set)
        n, mean = sums[0].detach(), sums[1:] / sums[0].detach()
        centred = x - mean.view(shape)
        var = allreduce((centred * centred).sum(dims), op=Sum,
                        process_set=self.process_set) / n
        if self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                unbiased = var.detach() * (n / (n - 1)) if n > 1 else var.detach()
                self.running_mean.mul_(1 - factor).add_(mean.detach().to(self.running_mean.dtype),
                                                        alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype),
                                                       alpha=factor)
        out = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out.to(input.dtype)

