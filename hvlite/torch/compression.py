"""`hvd.Compression`: hvlite.compression's methods in Horovod's torch protocol.

Horovod's compressors take and return tensors (`compress(t) -> (t, ctx)`, `decompress(t, ctx)`);
hvlite's take NumPy arrays and also run their own exchange (`allreduce_async`), which is what
hvlite.torch's allreduce and DistributedOptimizer use. Each entry here wraps one hvlite
compressor and speaks both: casts in torch for the tensor protocol, the hvlite compressor for the
exchange. Calling an entry with options gives a fresh one, as in hvlite.compression. A
compressor of your own (Horovod's `Compressor` protocol only) works too: its casts run in torch
around a plain reduction.
"""
import torch

from hvlite.compression import Compression as _Methods
from hvlite.compression import METHODS

_CASTS = {"none": None, "fp16": torch.float16, "bf16": torch.bfloat16}


class Compressor:
    """Horovod's interface for a compressor of your own: compress(tensor) -> (tensor, ctx) and
    decompress(tensor, ctx) -> tensor (static methods in Horovod's). hvlite.torch's allreduce,
    grouped_allreduce, reducescatter and DistributedOptimizer run such a compressor's casts in
    torch around a plain reduction of the compressed tensor, as Horovod does."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError("Compressor.compress")

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError("Compressor.decompress")


class NoneCompressor(Compressor):
    """Horovod's class of `Compression.none`: nothing done (taken as Compression.none)."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Horovod's class of `Compression.fp16`: floating tensors sent as float16. (hvlite's own
    `Compression.fp16` casts in the core instead; this class exists for code that names or
    subclasses it.)"""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx) if ctx.is_floating_point else tensor


class TorchCompressor(Compressor):
    def __init__(self, method, inner):
        self.method, self.inner = method, inner

    def compress(self, tensor):
        """Horovod's protocol; for the sparse and low-rank methods use allreduce or
        DistributedOptimizer, which exchange their payloads properly."""
        if self.method not in _CASTS:
            raise NotImplementedError(
                f"Compression.{self.method}: compress(tensor) exists only for none, fp16 and bf16; "
                f"pass compression= to allreduce or DistributedOptimizer instead")
        wire = _CASTS[self.method]
        if wire is None or not tensor.is_floating_point():
            return tensor, None
        return tensor.to(wire), tensor.dtype

    def decompress(self, tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)

    def allreduce_async(self, x, op, name, out=None, process_set=None):
        return self.inner.allreduce_async(x, op=op, name=name, out=out, process_set=process_set)

    def __call__(self, **options):
        return TorchCompressor(self.method, self.inner(**options))

    def __repr__(self):
        return f"hvlite.torch.Compression.{self.method}"


class TorchCompression:
    """Horovod's `hvd.Compression`: none and fp16 as in Horovod, plus hvlite's bf16, int8, topk,
    randomk, sign and powersgd (e.g. `Compression.topk(ratio=0.01)`)."""


for _m in METHODS:
    setattr(TorchCompression, _m, TorchCompressor(_m, getattr(_Methods, _m)))

Compression = TorchCompression     # Horovod's name: `hvd.Compression.fp16`

__all__ = ["Compression", "TorchCompression", "TorchCompressor", "Compressor", "NoneCompressor",
           "FP16Compressor"]
