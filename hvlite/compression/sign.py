"""1-bit compression with error feedback (EF-SignSGD, Karimireddy et al. 2019): send
sign(p) * mean|p| for p = gradient + residual, 8 signs per byte, keep p - sent as the residual.
The packed signs and the scale are all-gathered; every rank sums the decoded payloads in rank
order."""
import numpy as np

from hvlite import collectives
from hvlite.compression.base import (Compressor, Then, check_headers, gathered_chunks, header)
from hvlite.errors import InvalidArgumentError
from hvlite.ops import Average
from hvlite.process_sets import global_process_set


def pack(p):
    """Bit i of the result is 1 where p[i] >= 0 (little bit order, zero padded)."""
    return np.packbits(p >= 0, bitorder="little")


def unpack(bits, numel, dtype):
    """+1 / -1 per packed sign."""
    b = np.unpackbits(bits, count=numel, bitorder="little").astype(dtype)
    return b * 2 - 1


class Sign(Compressor):
    method = "sign"
    stateful = True
    first_kind = collectives.ALLGATHER
    state_maps = 2      # the residual and, with momentum, the velocity

    def __init__(self, momentum=0.0):
        if not 0.0 <= momentum < 1.0:
            raise InvalidArgumentError(f"sign: momentum must be in [0, 1), got {momentum!r}")
        super().__init__(momentum=momentum)

    @property
    def velocity(self):
        return self._state_maps()[1]

    def _momentum(self, g, name):
        """With momentum, the residual accumulates a local velocity (use SGD without momentum)."""
        m = self.options["momentum"]
        if not m:
            return g
        u = self.velocity.get(name)
        u = g.copy() if u is None or u.shape != g.shape else m * u + g
        self.velocity[name] = u
        return u

    def residual(self, name, process_set=None):
        return self._maps(process_set)[0].get(name)

    def compress(self, x, name):
        x = np.asarray(x)
        g = self._momentum(x.ravel(), name)
        e = self.state.get(name)
        p = g + e if e is not None and e.shape == g.shape else g.copy()
        scale = np.abs(p).mean(dtype=np.float64).astype(x.dtype).reshape(1)
        bits = pack(p)
        sent = unpack(bits, g.size, x.dtype) * scale[0]
        self.state[name] = p - sent
        return [scale, bits], (x.shape, x.dtype)

    def decompress(self, payload, ctx):
        scale, bits = payload
        shape, dtype = ctx
        return (unpack(bits, int(np.prod(shape)), dtype) * scale[0]).reshape(shape)

    def _reduce(self, x, name, op, n, ps=global_process_set):
        (scale, bits), (shape, dtype) = self.compress(x, name)
        numel, sb = x.size, scale.nbytes
        blob = np.concatenate([header(numel), scale.view(np.uint8), bits])
        self.account(name, x.nbytes, blob.nbytes, "allgather", n)
        h = collectives.allgather_async(blob, name=name, process_set=ps)

        def finish(res):
            chunks = gathered_chunks(res[0], n, blob.size, name, self.method)
            check_headers(chunks, numel, name, self.method)
            out = np.zeros(numel, dtype)
            for c in chunks:
                out += unpack(c[8 + sb:], numel, dtype) * c[8:8 + sb].view(dtype)[0]
            if op == Average:
                out /= np.asarray(n, dtype)
            return out.reshape(shape)
        return Then([h], finish)
