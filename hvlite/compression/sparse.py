"""Sparsification with error feedback: send k = ratio x size entries, keep the rest as a
residual that is added to the next step's gradient, so nothing is dropped for good.

top-k   the k largest magnitudes; (indices, values) all-gathered, summed in rank order.
        momentum>0 adds Deep Gradient Compression's momentum correction: the residual
        accumulates a local momentum, and the sent entries' momentum is cleared.
random-k k entries drawn from a generator seeded by (seed, tensor, step), so every rank draws
        the same indices: only the values travel, and they are all-reduced.
"""
import numpy as np

from hvlite import collectives
from hvlite.compression.base import (Compressor, Then, check_headers, check_ratio,
                                     gathered_chunks, header, seed_of)
from hvlite.errors import InvalidArgumentError
from hvlite.ops import Average
from hvlite.process_sets import global_process_set


def index_dtype(numel):
    """The narrowest index type that addresses the tensor."""
    return np.dtype(np.uint16 if numel <= 1 << 16 else np.uint32 if numel <= 1 << 32 else np.int64)


def count(ratio, numel):
    return min(numel, max(1, int(np.ceil(ratio * numel - 1e-9))))


class _Sparse(Compressor):
    stateful = True

    def residual(self, name, process_set=None):
        """This tensor's error-feedback residual (flat) on the set, or None before its first
        step there."""
        st = self._maps(process_set)[0].get(name)
        return None if st is None else st["v"]

    def _accumulate(self, g, name):
        """Error feedback: the gradient plus what previous steps did not send."""
        st = self.state.get(name)
        if st is None or st["v"].shape != g.shape:
            st = self.state[name] = {"v": np.zeros_like(g), "u": np.zeros_like(g), "step": 0}
        m = self.options.get("momentum", 0.0)
        if m:
            st["u"] = m * st["u"] + g
            v = st["v"] + st["u"]
        else:
            v = st["v"] + g
        return st, v

    def _sparsify(self, x, name):
        """The k entries of gradient + residual that `_pick` chooses, and their values; what is
        sent leaves the residual (and, with momentum, the momentum)."""
        x = np.asarray(x)
        st, v = self._accumulate(x.ravel(), name)
        idx = self._pick(v, count(self.options["ratio"], v.size), st, name)
        vals = v[idx]
        v[idx] = 0
        st["v"] = v
        if self.options.get("momentum"):
            st["u"][idx] = 0
        st["step"] += 1
        return x, idx, vals

    def decompress(self, payload, ctx):
        shape, dtype, idx = ctx
        out = np.zeros(int(np.prod(shape)), dtype)
        out[idx if idx is not None else payload[0]] = payload[-1]
        return out.reshape(shape)


class TopK(_Sparse):
    method = "topk"
    first_kind = collectives.ALLGATHER

    def __init__(self, ratio=0.01, momentum=0.0):
        check_ratio(ratio, "topk")
        if not 0.0 <= momentum < 1.0:
            raise InvalidArgumentError(f"topk: momentum must be in [0, 1), got {momentum!r}")
        super().__init__(ratio=ratio, momentum=momentum)

    def _pick(self, v, k, st, name):
        return np.sort(np.argpartition(np.abs(v), v.size - k)[v.size - k:])

    def compress(self, x, name):
        x, idx, vals = self._sparsify(x, name)
        return [idx.astype(index_dtype(x.size)), vals], (x.shape, x.dtype, None)

    def _reduce(self, x, name, op, n, ps=global_process_set):
        (idx, vals), (shape, dtype, _) = self.compress(x, name)
        numel = x.size
        blob = np.concatenate([header(numel), idx.view(np.uint8), vals.view(np.uint8)])
        self.account(name, x.nbytes, blob.nbytes, "allgather", n)
        h = collectives.allgather_async(blob, name=name, process_set=ps)
        ib = idx.nbytes

        def finish(res):
            chunks = gathered_chunks(res[0], n, blob.size, name, self.method)
            check_headers(chunks, numel, name, self.method)
            out = np.zeros(numel, dtype)
            for c in chunks:            # rank order: the same sums, bit for bit, everywhere
                out[c[8:8 + ib].view(idx.dtype)] += c[8 + ib:].view(dtype)
            if op == Average:
                out /= np.asarray(n, dtype)
            return out.reshape(shape)
        return Then([h], finish)


class RandomK(_Sparse):
    method = "randomk"

    def __init__(self, ratio=0.01, seed=0):
        check_ratio(ratio, "randomk")
        super().__init__(ratio=ratio, seed=seed)

    def _pick(self, v, k, st, name):
        rng = np.random.default_rng(seed_of(self.options["seed"], name, st["step"]))
        return np.sort(rng.choice(v.size, k, replace=False))

    def compress(self, x, name):
        x, idx, vals = self._sparsify(x, name)
        return [vals], (x.shape, x.dtype, idx)

    def _reduce(self, x, name, op, n, ps=global_process_set):
        (vals,), (shape, dtype, idx) = self.compress(x, name)
        self.account(name, x.nbytes, vals.nbytes, "allreduce", n)
        h = collectives.allreduce_async(vals, op=op, name=name, process_set=ps)

        def finish(res):
            out = np.zeros(x.size, dtype)
            out[idx] = res[0]
            return out.reshape(shape)
        return Then([h], finish)
