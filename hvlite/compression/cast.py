"""No compression, and Horovod's casts: send in float16 or bfloat16, reduce in that precision,
cast the result back to the tensor's own dtype."""
import numpy as np

from hvlite import collectives
from hvlite.compression.base import Compressor, Then
from hvlite.errors import DtypeError, InvalidArgumentError


class NoCompression(Compressor):
    """The plain all-reduce (any dtype, any op), counted like the others."""

    method = "none"
    lossy = False

    def compress(self, x, name=None):
        return [np.asarray(x)], None

    def decompress(self, payload, ctx):
        return payload[0]

    def _reduce(self, x, name, op, n):
        self.account(name, x.nbytes, x.nbytes, "allreduce", n)
        return collectives.allreduce_async(x, op=op, name=name)


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
        return [x.astype(self.wire)], x.dtype

    def decompress(self, payload, ctx):
        return payload[0].astype(ctx)

    def _reduce(self, x, name, op, n):
        low = x.astype(self.wire)
        self.account(name, x.nbytes, low.nbytes, "allreduce", n)
        h = collectives.allreduce_async(low, op=op, name=name)
        return Then([h], lambda r: r[0].astype(x.dtype))
