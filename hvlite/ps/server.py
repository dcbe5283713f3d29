"""A server rank: holds its shard of every parameter and applies the optimizer to it.

sync  -- the pushes of clock c are kept per worker and, once every worker's is in, summed in
         worker order and averaged: one optimizer step, the same math as all-reduce training.
async -- every push is applied at arrival (scaled by 1/W, so W pushes weigh one sync step).
ssp   -- applied at arrival as in async, but a PULL at clock c is answered only once the slowest
         active worker has pushed c - k times. k = 0 runs the sync rule: applied at arrival, a
         pull could see a fast worker's update of the next clock, which sync never shows.

Staleness of an applied gradient = its clock (the step it belongs to: its worker's pushes before
it) minus the clock of the parameters it was computed from (the server clock at the pull: every
active worker had pushed that many times). Under ssp a pull at clock c waits for a server clock
of c - k, so no applied gradient is staler than k; under sync it is always 0.
"""
import collections
import time

import numpy as np

from hvlite import timeline
from hvlite._core import ps as core
from hvlite.errors import PSError
from hvlite.ps.protocol import (ABORT, DONE, INIT, PARAMS, PULL, PUSH, TAG_CTRL, TAG_PARAMS,
                                TAG_PUSH, TAG_REPLY, TAG_TEXT, send_abort)


class Server:
    def __init__(self, link, layout, index, rank, optimizer, mode, staleness, workers, server_ranks):
        self.link, self.layout, self.index, self.rank = link, layout, index, rank
        self.optimizer, self.mode, self.k = optimizer, mode, staleness
        self.averaged = mode == "sync" or (mode == "ssp" and staleness == 0)
        self.workers, self.server_ranks = workers, server_ranks
        self.shard = np.empty(layout.shard_sizes[index], layout.dtype)
        self.views = layout.views(self.shard, index)
        self.clocks = [0] * workers
        self.done = set()
        self.deferred = []                    # (worker, clock, time asked)
        self.acc = {}                         # sync: clock -> {worker: (grad, param_clock)}
        self.hist = collections.Counter()
        self.stats = {"rank": rank, "role": "server", "pushes": 0, "updates": 0, "pulls": 0,
                      "deferred_pulls": 0, "deferred_wait_s": 0.0, "apply_s": 0.0}

    def receive_init(self):
        """The initial values of this shard, from worker 0 (so ranks may start differently)."""
        h = np.zeros(4, np.int64)
        self.link.recv(h, 0, TAG_CTRL)
        if h[0] != INIT:
            raise PSError(f"hvlite.ps: server rank {self.rank} expected the initial parameters "
                          f"from rank 0, got message kind {int(h[0])}")
        self.link.recv(self.shard, 0, TAG_PUSH)

    def serve(self):
        """Run until every worker has said DONE; on any failure tell every other rank first."""
        try:
            core.serve_loop(self.link, self)
            self.link.drain()
        except PSError as e:
            if not getattr(e, "remote", False):
                self.abort(str(e))
            raise
        except BaseException as e:
            msg = f"hvlite.ps: server rank {self.rank} failed: {type(e).__name__}: {e}"
            self.abort(msg)
            raise PSError(msg) from e

    def min_clock(self):
        active = [c for w, c in enumerate(self.clocks) if w not in self.done]
        return min(active) if active else max(self.clocks)

    def on_message(self, src, h):
        kind = int(h[0])
        if kind == PUSH:
            self.on_push(src, int(h[1]), int(h[2]))
        elif kind == PULL:
            self.stats["pulls"] += 1
            if self.ready(int(h[1])):
                self.reply(src)
            else:
                self.stats["deferred_pulls"] += 1
                self.deferred.append((src, int(h[1]), time.perf_counter()))
        elif kind == DONE:
            self.done.add(src)
            if self.averaged:
                self.apply_complete()
        elif kind == ABORT:
            text = self.link.recv_bytes(src, TAG_TEXT).decode("utf-8", "replace")
            if src < self.workers:   # a worker failed: the other workers hear it from us
                self.tell_workers(text, skip=src)
            err = PSError(text)
            err.remote = True
            raise err
        else:
            raise PSError(f"hvlite.ps: server rank {self.rank} got unknown message kind {kind} "
                          f"from rank {src}")
        self.answer_deferred()
        self.link.reap()
        return len(self.done) < self.workers

    def on_push(self, w, clock, param_clock):
        grad = np.empty_like(self.shard)
        self.link.recv(grad, w, TAG_PUSH)
        if clock != self.clocks[w]:
            raise PSError(f"hvlite.ps: worker rank {w} pushed clock {clock}, server rank "
                          f"{self.rank} expected {self.clocks[w]}")
        stale = clock - param_clock
        self.clocks[w] = clock + 1
        self.stats["pushes"] += 1
        if self.averaged:
            self.acc.setdefault(clock, {})[w] = (grad, param_clock)
            self.apply_complete()
        else:
            grad *= 1.0 / self.workers
            self.apply([grad], [stale])

    def apply_complete(self):
        """sync: one averaged step per clock whose pushes are all in (done workers excused)."""
        while self.acc:
            c = min(self.acc)
            got = self.acc[c]
            if any(w not in got and w not in self.done for w in range(self.workers)):
                return
            del self.acc[c]
            total = None
            for w in sorted(got):              # a fixed order: the same sum on every run
                total = got[w][0].copy() if total is None else np.add(total, got[w][0], out=total)
            total *= 1.0 / len(got)
            self.apply([total], [c - got[w][1] for w in sorted(got)])

    def apply(self, grads, stalenesses):
        t0 = time.perf_counter()
        label = "ps.apply staleness=" + ",".join(str(s) for s in stalenesses)
        with timeline.span(label):
            for g in grads:
                self.optimizer.step(self.views, self.layout.views(g, self.index))
        self.hist.update(stalenesses)
        self.stats["updates"] += len(grads)
        self.stats["apply_s"] += time.perf_counter() - t0

    def ready(self, clock):
        if self.mode == "async":
            return True
        return self.min_clock() >= clock - (self.k if self.mode == "ssp" else 0)

    def answer_deferred(self):
        if not self.deferred:
            return
        still = []
        for w, c, t in self.deferred:
            if self.ready(c):
                self.stats["deferred_wait_s"] += time.perf_counter() - t
                self.reply(w)
            else:
                still.append((w, c, t))
        self.deferred = still

    def reply(self, w):
        self.link.isend(core.header(PARAMS, self.min_clock()), w, TAG_REPLY)
        self.link.isend(self.shard.copy(), w, TAG_PARAMS)

    def _live_workers(self, skip=None):
        return [(w, TAG_REPLY) for w in range(self.workers) if w != skip and w not in self.done]

    def tell_workers(self, text, skip=None):
        data = np.frombuffer(text.encode(), np.uint8).copy()
        for w, tag in self._live_workers(skip):
            self.link.isend(core.header(ABORT), w, tag)
            self.link.isend(data, w, TAG_TEXT)

    def abort(self, text):
        """Tell every worker and the other servers, best effort, before this rank goes down."""
        send_abort(self.link, text, self._live_workers() +
                   [(r, TAG_CTRL) for r in self.server_ranks if r != self.rank])

    def final(self):
        s = dict(self.stats)
        s["staleness"] = dict(self.hist)
        return s
