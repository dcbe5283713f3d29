"""PowerSGD (Vogels et al. 2019): a rank-r approximation P Q^T of each weight matrix by one
step of power iteration per training step, warm-started from the previous step's Q, with
error feedback.

    M = gradient + residual;  P = M Q;  all-reduce P;  orthogonalize P;  Q = M^T P;
    all-reduce Q;  result = P Q^T;  residual = M - P Q^T

Vectors, and matrices that would shrink by less than `min_compression`, are all-reduced dense.
The two all-reduces run one after the other, so synchronize a PowerSGD handle in the same order
on every rank (DistributedOptimizer does).
"""
import numpy as np

from hvlite import collectives
from hvlite.compression.base import Compressor, seed_of
from hvlite.errors import InvalidArgumentError
from hvlite.ops import Sum
from hvlite.process_sets import global_process_set
from hvlite.work import ChainHandle


def orthogonalize(p):
    """Orthonormal columns spanning p's (Gram-Schmidt by Householder QR)."""
    return np.linalg.qr(p)[0]


class PowerSGD(Compressor):
    method = "powersgd"
    stateful = True

    def __init__(self, rank=2, min_compression=2.0, seed=0):
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
            raise InvalidArgumentError(f"powersgd: rank must be an integer >= 1, got {rank!r}")
        super().__init__(rank=int(rank), min_compression=min_compression, seed=seed)

    def residual(self, name, process_set=None):
        """This tensor's error-feedback residual (as its matrix) on the set, or None."""
        st = self._maps(process_set)[0].get(name)
        return None if st is None else st["e"]

    def matrix_shape(self, shape):
        """(rows, cols) the tensor is compressed as, or None when it goes dense."""
        if len(shape) < 2:
            return None
        n, m = shape[0], int(np.prod(shape[1:]))
        r = min(self.options["rank"], n, m)
        return (n, m) if (n + m) * r * self.options["min_compression"] <= n * m else None

    def _start(self, x, name):
        """M (gradient plus residual, as a float matrix), its warm-start Q and P = M Q."""
        n, m = self.matrix_shape(x.shape)
        work = np.float64 if x.dtype == np.float64 else np.float32
        M = x.reshape(n, m).astype(work)
        st = self.state.get(name)
        if st is None or st["e"].shape != M.shape:
            r = min(self.options["rank"], n, m)
            rng = np.random.default_rng(seed_of(self.options["seed"], name))
            st = self.state[name] = {"e": np.zeros_like(M),
                                     "q": rng.standard_normal((m, r)).astype(work)}
        M = M + st["e"]
        return st, M, M @ st["q"]

    def compress(self, x, name):
        x = np.asarray(x)
        if self.matrix_shape(x.shape) is None:
            return [x], (x.shape, x.dtype)
        st, M, P = self._start(x, name)
        P = orthogonalize(P)
        Q = M.T @ P
        st["q"], st["e"] = Q, M - P @ Q.T
        return [P, Q], (x.shape, x.dtype)

    def decompress(self, payload, ctx):
        shape, dtype = ctx
        if len(payload) == 1:
            return payload[0]
        P, Q = payload
        return (P @ Q.T).astype(dtype).reshape(shape)

    def _reduce(self, x, name, op, n, ps=global_process_set):
        if self.matrix_shape(x.shape) is None:
            self.account(name, x.nbytes, x.nbytes, "allreduce", n)
            return collectives.allreduce_async(x, op=op, name=name, process_set=ps)
        st, M, P = self._start(x, name)
        Q_bytes = st["q"].nbytes
        self.account(name, x.nbytes, P.nbytes + Q_bytes, "allreduce", n)
        h = collectives.allreduce_async(P, name=name, process_set=ps)          # Average

        def finish(res):
            P = orthogonalize(res[0])
            Q = collectives.allreduce(M.T @ P, name=name + ".Q", process_set=ps)
            approx = P @ Q.T
            st["q"], st["e"] = Q, M - approx
            if op == Sum:
                approx *= n
            return approx.astype(x.dtype).reshape(x.shape)
        # the Q step goes out when P's finishes, not at synchronize(): handles stay free to be
        # synchronized in any order on each rank
        return ChainHandle(h, lambda r: finish([r]))
