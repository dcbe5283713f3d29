"""No compression, and Horovod's casts: send in float16 or bfloat16, reduce in that precision,
cast the result back to the tensor's own dtype.

float32 <-> 16-bit casts run in the core's kernel (vectorised, the same bits as NumPy and
ml_dtypes): NumPy's own float16 cast raises the FP underflow flag for every value below half's
normal range, ~80 ns each, which made small gradients cost more to cast than to send.
"""
import numpy as np

from hvlite import collectives, runtime, submit as host
from hvlite._core.codes import DTYPES
from hvlite._core.kernels.cast import cast_into
from hvlite.compression.base import Compressor, Then
from hvlite.errors import DtypeError, InvalidArgumentError
from hvlite.ops import Adasum, Average, Sum, as_op
from hvlite.process_sets import global_process_set, state_of


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
        self._wire = None

    @property
    def wire(self):
        """The dtype on the wire (bfloat16 is looked up when first used: ml_dtypes is optional)."""
        if self._wire is None:
            self._wire = _bf16() if self.options["dtype"] == "bfloat16" else np.dtype(np.float16)
        return self._wire

    def compress(self, x, name=None):
        x = np.asarray(x)
        return [cast(x, self.wire)], x.dtype

    def decompress(self, payload, ctx):
        return cast(payload[0], np.dtype(ctx))

    def check(self, x, name, op=Sum):
        """Horovod's cast compressors take any tensor and any op: a float tensor is cast for
        the wire and reduced with the op in 16 bits (Adasum too), an integer one goes as it
        is (_plain)."""

    @staticmethod
    def _plain(x):
        return x.dtype.kind != "f" and x.dtype.name != "bfloat16"

    def _as16(self, x, ps):
        """The core's code for reducing float32 `x` as this 16-bit type itself, rounding inside
        the reduction, when its set lies on one node (SetState.round16; the same on each of its
        ranks); else None: cast. Both do the same arithmetic (the same bits wherever the
        additions come in the same order); on one node the casts' passes over memory cost more
        than the halved bytes save (docs/compression.md)."""
        if x.dtype != _F32 or not state_of(runtime.current(), ps, "compression").round16:
            return None
        return _AS16[self.options["dtype"]]

    def _start(self, x, name, op, n, ps):
        """x cast for the wire and its all-reduce started; `low` is ours alone, so it is
        reduced in place rather than into another new array."""
        low = cast(x, self.wire)
        self.account(name, x.nbytes, low.nbytes, "allreduce", n)
        return collectives.allreduce_async_(low, op=op, name=name, process_set=ps)

    def _reduce(self, x, name, op, n, ps=global_process_set):
        if self._plain(x):
            return NoCompression._reduce(self, x, name, op, n, ps)
        code = None if op is Adasum else self._as16(x, ps)     # (Adasum: its own algorithm)
        if code is not None:
            self.account(name, x.nbytes, x.nbytes // 2, "allreduce", n)
            return host.allreduce_async(x, op, name, process_set=ps, reduce_as=code)
        return Then([self._start(x, name, op, n, ps)], lambda r: cast(r[0], x.dtype))

    def _reduce_into(self, x, name, op, n, out, ps=global_process_set):
        """The result cast straight into `out`: no new array, no copy (x is cast before the
        handle exists, so out may be x). On one node x is reduced into out itself."""
        if self._plain(x):         # (the plain reduction, copied into out)
            return super()._reduce_into(x, name, op, n, out, ps)
        code = None if op is Adasum else self._as16(x, ps)
        if code is not None:
            self.account(name, x.nbytes, x.nbytes // 2, "allreduce", n)
            if out is x:
                return host.allreduce_async_(x, op, name, process_set=ps, reduce_as=code)
            return Then([host.allreduce_async(x, op, name, process_set=ps, reduce_as=code)],
                        lambda r: _copied(r[0], out))
        return Then([self._start(x, name, op, n, ps)], lambda r: cast_to(r[0], out))

    def allreduce_async(self, x, op=Average, name=None, out=None, process_set=None):
        """As Compressor.allreduce_async; the gradient hooks' call takes the lean way
        (lean_async) where it can."""
        op = as_op(op)
        if type(x) is np.ndarray and (out is None or out is x):
            h = self.lean_async(x, x if out is x else None, op, name, process_set)
            if h is not None:
                return h
        return super().allreduce_async(x, op, name, out, process_set)

    def lean_async(self, x, out, op, name, process_set, ret=None):
        """The gradient hooks' call, every tensor of every step (a named C-contiguous float32
        array, Sum or Average, on the global set, with no timeline open), in one call of the
        core's lean face: the cast, the accounting, the submit, and a handle that casts the
        result back into `out` (a new float32 array when None) and returns `ret` (out when
        None). None: the general way takes it (as it does with a timeline open, for its
        COMPRESS span). The general way's checks, naming and handles in Python cost ~20 us a
        tensor over the casts' ~10 us (256x256, docs/benchmarks.md)."""
        lean = runtime.lean
        if (lean is None or (op is not Sum and op is not Average) or x.dtype != _F32
                or (process_set is not None and process_set is not global_process_set)):
            return None
        tl = runtime.current().timeline
        if tl is not None and tl.active:
            return None
        if out is None:
            out = np.empty(x.shape, _F32)
        return lean.allreduce_cast_async(x, out, op, name, self.wire, out if ret is None else ret,
                                         self.account)


_F32, _F16 = np.dtype(np.float32), np.dtype(np.float16)
# float32 reduced as float16 / bfloat16 (the core's codes, _core/codes.h)
_AS16 = {"float16": DTYPES.index("float32 as float16"), "bfloat16": DTYPES.index("float32 as bfloat16")}


def _copied(x, out):
    np.copyto(out, x)
    return out


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
