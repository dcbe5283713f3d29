"""Message kinds. Control headers are int64[4] = (kind, a, b, c):

    worker -> server, TAG_CTRL:  INIT, PUSH(clock, param_clock), PULL(clock), DONE, ABORT
    server -> worker, TAG_REPLY: PARAMS(server_clock), ABORT
    server -> server, TAG_CTRL:  ABORT

INIT and PUSH are followed by the shard on TAG_PUSH, PARAMS by the shard on TAG_PARAMS, ABORT
by its text on TAG_TEXT. MPI keeps each sender's messages of one tag in order, so a worker's
pushes are applied before its DONE and before any later PULL.
"""
from hvlite._core.ps import TAG_CTRL, TAG_PARAMS, TAG_PUSH, TAG_REPLY, TAG_TEXT  # noqa: F401

INIT, PUSH, PULL, DONE, ABORT, PARAMS = 1, 2, 3, 4, 5, 6
MODES = ("sync", "async", "ssp")


def send_abort(link, text, targets):
    """Best effort, before this rank goes down: ABORT and its text to each (rank, header tag),
    then a short drain so the messages leave."""
    import numpy as np
    from hvlite._core import ps as core
    data = np.frombuffer(text.encode(), np.uint8).copy()
    for rank, tag in targets:
        link.isend(core.header(ABORT), rank, tag)
        link.isend(data, rank, TAG_TEXT)
    try:
        link.drain(2.0)
    except Exception:
        pass
