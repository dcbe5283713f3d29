"""A worker rank: pulls parameters from every server, pushes its gradients to every server.

A push returns as soon as its sends are started; they complete while the next step computes
(the next push or pull waits for them first). A pull asks every server and waits (without the
GIL) for each one's shard; under sync and ssp a server holds the answer back until the slowest
worker is close enough, which is where a straggler's cost shows up.
"""
import time

import numpy as np

from hvlite import timeline
from hvlite._core import ps as core
from hvlite.errors import PSError
from hvlite.ps.protocol import (ABORT, DONE, INIT, PARAMS, PULL, PUSH, TAG_CTRL, TAG_PARAMS,
                                TAG_PUSH, TAG_REPLY, TAG_TEXT, send_abort)


class Worker:
    def __init__(self, link, layout, rank, params, server_ranks):
        self.link, self.layout, self.rank, self.params = link, layout, rank, params
        self.server_ranks = server_ranks
        self.flat = layout.empty()
        self.clock = 0              # pushes so far
        self.param_clock = 0        # server clock of the parameters last pulled
        self.stats = {"rank": rank, "role": "worker", "steps": 0, "pull_wait_s": 0.0,
                      "push_s": 0.0}

    def send_init(self):
        """Worker 0 gives every server its shard's initial values."""
        self.layout.pack(self.params, self.flat, "parameter")
        for s, r in enumerate(self.server_ranks):
            self.link.isend(core.header(INIT), r, TAG_CTRL)
            self.link.isend(self.layout.shard(self.flat, s), r, TAG_PUSH)
        self.link.drain()

    def check_abort(self):
        """A server's ABORT can only be waiting when no pull is in flight: raise it now."""
        src = self.link.probe(core.ANY_SOURCE, TAG_REPLY)
        if src is not None:
            h = np.zeros(4, np.int64)
            self.link.recv(h, src, TAG_REPLY)
            self.raise_abort(src, h)

    def raise_abort(self, src, h):
        if h[0] != ABORT:
            raise PSError(f"hvlite.ps: rank {self.rank} got an unexpected reply kind {int(h[0])} "
                          f"from server rank {src}")
        text = self.link.recv_bytes(src, TAG_TEXT).decode("utf-8", "replace")
        err = PSError(text)
        err.remote = True
        raise err

    def pull(self):
        t0 = time.perf_counter()
        with timeline.span("ps.pull"):
            self.check_abort()
            for r in self.server_ranks:
                self.link.isend(core.header(PULL, self.clock), r, TAG_CTRL)
            h = np.zeros(4, np.int64)
            clocks = []
            for _ in self.server_ranks:
                src = self.wait_reply(h)
                if h[0] != PARAMS:
                    self.raise_abort(src, h)
                clocks.append(int(h[1]))
                s = self.server_ranks.index(src)
                self.link.recv(self.layout.shard(self.flat, s), src, TAG_PARAMS)
            self.layout.unpack(self.flat, self.params)
            self.param_clock = min(clocks)
            self.link.reap()
        self.stats["pull_wait_s"] += time.perf_counter() - t0
        return self.params

    def wait_reply(self, h):
        try:
            return self.link.recv(h, core.ANY_SOURCE, TAG_REPLY)
        except core.PSTimeout:
            raise PSError(f"hvlite.ps: worker rank {self.rank} waited {self.link.timeout:.0f} s "
                          "for a server's answer (HVLITE_PS_TIMEOUT); a server is gone or hung") from None

    def push(self, grads):
        t0 = time.perf_counter()
        with timeline.span("ps.push"):
            self.check_abort()
            flat = self.layout.pack(grads, self.layout.empty())
            self.link.drain()                     # the previous push, sent during this compute
            for s, r in enumerate(self.server_ranks):
                self.link.isend(core.header(PUSH, self.clock, self.param_clock), r, TAG_CTRL)
                self.link.isend(self.layout.shard(flat, s), r, TAG_PUSH)
            self.clock += 1
            self.stats["steps"] += 1
        self.stats["push_s"] += time.perf_counter() - t0

    def done(self):
        """Finish: in-flight pushes reach the servers before DONE (same sender, same tag)."""
        self.check_abort()
        for r in self.server_ranks:
            self.link.isend(core.header(DONE), r, TAG_CTRL)
        self.link.drain()

    def abort(self, text):
        send_abort(self.link, text, [(r, TAG_CTRL) for r in self.server_ranks])

    def final(self):
        return dict(self.stats)
