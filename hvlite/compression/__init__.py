"""Gradient compression: fewer bytes per all-reduce, for when the network is the bottleneck.

    from hvlite.compression import Compression
    g = hvlite.allreduce(grad, name="layer0.w", compression=Compression.fp16)
    opt = DistributedOptimizer(SGD(0.1), params, compression=Compression.topk(ratio=0.01))

Methods: none, fp16, bf16 (casts, Horovod's), int8 (per-chunk scale), topk / randomk (sparse,
error feedback), sign (1 bit, error feedback), powersgd (low rank, error feedback). Each entry
of Compression is a ready compressor; calling it gives a fresh one with the options given and
its own per-tensor state (error-feedback residuals, PowerSGD's Q), which a stateful method
keys by tensor name. `stats()` counts the bytes every method sent.
"""
from hvlite.compression.base import Compressor
from hvlite.compression.cast import Cast, NoCompression
from hvlite.compression.int8 import Int8
from hvlite.compression.powersgd import PowerSGD
from hvlite.compression.sign import Sign
from hvlite.compression.sparse import RandomK, TopK
from hvlite.compression.accounting import reset_stats, stats


class Compression:
    """Horovod's spelling: `Compression.none`, `Compression.fp16`, ...; the configurable ones
    take options: `Compression.topk(ratio=0.01)`, `Compression.powersgd(rank=2)`."""
    none = NoCompression()
    fp16 = Cast("float16")
    bf16 = Cast("bfloat16")
    int8 = Int8()
    topk = TopK()
    randomk = RandomK()
    sign = Sign()
    powersgd = PowerSGD()


METHODS = ("none", "fp16", "bf16", "int8", "topk", "randomk", "sign", "powersgd")

__all__ = ["Compression", "Compressor", "NoCompression", "Cast", "Int8", "TopK", "RandomK",
           "Sign", "PowerSGD", "stats", "reset_stats", "METHODS"]
