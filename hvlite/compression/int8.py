"""8-bit quantization: one float32 scale per chunk of `chunk` values (max |x| / 127), values
rounded to nearest or, with stochastic=True, up or down with the probability that keeps them
unbiased. Payloads are all-gathered and dequantized before summing, so the sum never overflows
8 bits and is the same on every rank."""
import numpy as np

from hvlite import collectives, runtime
from hvlite.compression.base import (Compressor, Then, check_headers, gathered_chunks, header,
                                     seed_of)
from hvlite.errors import InvalidArgumentError
from hvlite.ops import Average
from hvlite.process_sets import global_process_set


class Int8(Compressor):
    method = "int8"
    first_kind = collectives.ALLGATHER

    def __init__(self, chunk=256, stochastic=False, seed=0):
        if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
            raise InvalidArgumentError(f"int8: chunk must be a positive integer, got {chunk!r}")
        super().__init__(chunk=chunk, stochastic=stochastic, seed=seed)
        self._rng = None

    def _random(self, size):
        if self._rng is None:
            rank = runtime._current.engine.rank if runtime._current is not None else 0
            self._rng = np.random.default_rng(seed_of(self.options["seed"], rank))
        return self._rng.random(size, dtype=np.float32)

    def compress(self, x, name=None):
        x = np.asarray(x)
        c = self.options["chunk"]
        g = x.ravel().astype(np.float32)
        pad = (-g.size) % c
        blocks = np.concatenate([g, np.zeros(pad, np.float32)]).reshape(-1, c)
        scale = (np.abs(blocks).max(axis=1) / np.float32(127)).astype(np.float32)
        y = blocks / np.where(scale > 0, scale, np.float32(1))[:, None]
        y = np.floor(y + self._random(y.shape)) if self.options["stochastic"] else np.rint(y)
        q = np.clip(y, -127, 127).astype(np.int8)
        return [scale, q.ravel()[:g.size]], (x.shape, x.dtype)

    def decompress(self, payload, ctx):
        scale, q = payload
        shape, dtype = ctx
        return self._dequantize(scale, q).astype(dtype).reshape(shape)

    def _dequantize(self, scale, q):
        c = self.options["chunk"]
        return q.astype(np.float32) * np.repeat(scale, c)[:q.size]

    def _reduce(self, x, name, op, n, ps=global_process_set):
        (scale, q), (shape, dtype) = self.compress(x, name)
        numel, sb = x.size, scale.nbytes
        blob = np.concatenate([header(numel), scale.view(np.uint8), q.view(np.uint8)])
        self.account(name, x.nbytes, blob.nbytes, "allgather", n)
        h = collectives.allgather_async(blob, name=name, process_set=ps)

        def finish(res):
            chunks = gathered_chunks(res[0], n, blob.size, name, self.method)
            check_headers(chunks, numel, name, self.method)
            out = np.zeros(numel, np.float32)
            for c in chunks:
                out += self._dequantize(c[8:8 + sb].view(np.float32), c[8 + sb:].view(np.int8))
            if op == Average:
                out /= np.float32(n)
            return out.astype(dtype).reshape(shape)
        return Then([h], finish)
