"""No compression, and Horovod's casts: send in float16 or bfloat16, reduce in that precision,
cast the result back to the tensor's own dtype.

float32 <-> 16-bit casts run in the core's kernel (vectorised, the same bits as NumPy and
ml_dtypes): NumPy's own float16 cast raises the FP underflow flag for every value below half's
normal range, ~80 ns each, which made small gradients cost more to cast than to send.
"""
import numpy as np

from hvlite import collectives
from hvlite._core.kernels.cast import cast_into
from hvlite.compression.base import Compressor, Then
from hvlite.errors import DtypeError, InvalidArgumentError
from hvlite.process_sets import global_process_set


class NoCompression(Compressor):
    """The plain all-reduce (any dtype, any op), counted like the others."""

    method = "none"
    lossy = False

    def compress(self, x, name=None):
        return [np.asarray(x)], None

    def decompress(self, payload, ctx):
        return payload[0]

    def _reduce(self, x, name, op, n, ps=global_process_set):
        self.account(name, x.nbytes, x.nbytes, "allreduce", n)
        return collectives.allreduce_async(x, op=op, name=name, process_set=ps)


def _bf16():
    try:
        import ml_dtypes
    except ImportError:
        raise DtypeError("compression bf16 needs the ml_dtypes package for NumPy's bfloat16") from None
    return np.dtype(ml_dtypes.bfloat16)


class Cast(Compressor):
    """Cast to a 2-byte float for the wire and back; `dtype`: "float16" or "bfloat16"."""

    def __init__(self, dtype="float16"):
        if dtype not in ("float16", "bfloat16"):
            raise InvalidArgumentError(f"cast compression: dtype must be 'float16' or "
                                       f"'bfloat16', got {dtype!r}")
        super().__init__(dtype=dtype)
        self.method = "fp16" if dtype == "float16" else "bf16"

    @property
    def wire(self):
        """The dtype on the wire (bfloat16 is looked up when first used: ml_dtypes is optional)."""
        return _bf16() if self.options["dtype"] == "bfloat16" else np.dtype(np.float16)

    def compress(self, x, name=None):
        x = np.asarray(x)
        return [cast(x, self.wire)], x.dtype

    def decompress(self, payload, ctx):
        return cast(payload[0], np.dtype(ctx))

    def _start(self, x, name, op, n, ps):
        """x cast for the wire and its all-reduce started; `low` is ours alone, so it is
        reduced in place rather than into another new array."""
        low = cast(x, self.wire)
        self.account(name, x.nbytes, low.nbytes, "allreduce", n)
        return collectives.allreduce_async_(low, op=op, name=name, process_set=ps)

    def _reduce(self, x, name, op, n, ps=global_process_set):
        return Then([self._start(x, name, op, n, ps)], lambda r: cast(r[0], x.dtype))

    def _reduce_into(self, x, name, op, n, out, ps=global_process_set):
        """The result cast straight into `out`: no new array, no copy (x is cast before the
        handle exists, so out may be x)."""
        return Then([self._start(x, name, op, n, ps)], lambda r: cast_to(r[0], out))


_F32, _F16 = np.dtype(np.float32), np.dtype(np.float16)


def _half(dtype):
    return dtype == _F16 or dtype.type.__name__ == "bfloat16"


def _kernel_fits(x, dtype):
    """The core's kernel takes C-contiguous float32 <-> float16/bfloat16 (compared as dtypes:
    dtype.name is a slow Python property, and this runs twice per tensor)."""
    if not x.flags.c_contiguous:
        return False
    return _half(dtype) if x.dtype == _F32 else dtype == _F32 and _half(x.dtype)


def cast(x, dtype):
    """A new array of x's shape in `dtype`: NumPy's astype bits, by the core's kernel where it
    has the pair."""
    if not _kernel_fits(x, dtype):
        return x.astype(dtype)
    return cast_into(x, np.empty(x.shape, dtype))


def cast_to(x, out):
    """x cast into `out` (x's shape; the same bits as cast), which is returned."""
    if out.flags.c_contiguous and _kernel_fits(x, out.dtype):
        return cast_into(x, out)
    np.copyto(out, x, casting="unsafe")     # astype's cast, in one pass, no array between
    return out
