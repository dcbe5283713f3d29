"""Where every parameter's elements live: server s holds block s of every parameter.

Each parameter is cut into S nearly equal blocks (the first `size % S` one element longer), so
every server holds a shard of every parameter and the bytes per server differ by at most one
element per parameter. A worker's push is the S shards of its gradient, one per server, so a
large push is split across all servers. The wire format of a server's shard is its blocks of
the parameters in sorted name order, concatenated.
"""
import numpy as np

from hvlite.errors import DtypeError, InvalidArgumentError

DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def block(count, parts, b):
    base, extra = divmod(count, parts)
    return b * base + min(b, extra)


class Layout:
    def __init__(self, params, servers):
        if not isinstance(params, dict) or not params:
            raise InvalidArgumentError("hvlite.ps: params must be a non-empty dict {name: array}")
        dtypes = {np.asarray(params[n]).dtype for n in params}
        for name in sorted(params):
            a = params[name]
            if not isinstance(a, np.ndarray) or not a.flags.c_contiguous or not a.flags.writeable:
                raise InvalidArgumentError(f"hvlite.ps: parameter {name!r} must be a writable "
                                           "C-contiguous NumPy array")
            if a.dtype not in DTYPES:
                raise DtypeError(f"hvlite.ps: parameter {name!r} has dtype {a.dtype}; the "
                                 "parameter server holds float32 or float64")
        if len(dtypes) != 1:
            raise DtypeError(f"hvlite.ps: every parameter must have the same dtype, got "
                             f"{sorted(str(d) for d in dtypes)}")
        self.names = sorted(params)
        self.shapes = {n: params[n].shape for n in self.names}
        self.dtype = dtypes.pop()
        self.servers = servers
        # pieces[s] = [(name, start, stop)] of server s; offsets[s] = where its shard begins
        self.pieces = [[(n, block(params[n].size, servers, s), block(params[n].size, servers, s + 1))
                        for n in self.names] for s in range(servers)]
        self.shard_sizes = [sum(b - a for _, a, b in p) for p in self.pieces]
        self.offsets = np.concatenate([[0], np.cumsum(self.shard_sizes)]).astype(np.int64)

    def describe(self):
        """What every rank must agree on."""
        return (self.names, [self.shapes[n] for n in self.names], str(self.dtype), self.servers)

    def empty(self):
        return np.empty(int(self.offsets[-1]), self.dtype)

    def shard(self, flat, s):
        return flat[self.offsets[s]:self.offsets[s + 1]]

    def pack(self, arrays, out, what="gradient"):
        """arrays {name: array} into the wire layout `out` (every server's shard, in order)."""
        missing = [n for n in self.names if n not in arrays]
        extra = [n for n in arrays if n not in self.shapes]
        if missing or extra:
            raise InvalidArgumentError(f"hvlite.ps: push needs a {what} for every parameter; "
                                       f"missing {missing}, unknown {extra}")
        for n in self.names:
            g = np.asarray(arrays[n])
            if g.shape != self.shapes[n]:
                raise InvalidArgumentError(f"hvlite.ps: {what} {n!r} has shape {g.shape}, the "
                                           f"parameter has {self.shapes[n]}")
        for s in range(self.servers):
            off = self.offsets[s]
            for n, a, b in self.pieces[s]:
                out[off:off + b - a] = np.asarray(arrays[n]).reshape(-1)[a:b]
                off += b - a
        return out

    def unpack(self, flat, arrays):
        """The wire layout back into arrays {name: array} (in place)."""
        for s in range(self.servers):
            off = self.offsets[s]
            for n, a, b in self.pieces[s]:
                arrays[n].reshape(-1)[a:b] = flat[off:off + b - a]
                off += b - a

    def views(self, shard, s):
        """{name: view} of server s's blocks inside its shard buffer, for the optimizer."""
        out, off = {}, 0
        for n, a, b in self.pieces[s]:
            if b > a:
                out[n] = shard[off:off + b - a]
            off += b - a
        return out
