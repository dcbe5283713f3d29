"""Parameter-server training beside all-reduce: S server ranks hold the parameters, the other
ranks are workers that pull parameters and push gradients.

    ps = hvlite.ps.init(params, SGD(0.1), mode="ssp", staleness=2, servers=1)
    if ps.is_server:
        ps.serve()                       # until every worker has closed
    else:
        for batch in data:
            p = ps.pull()                # {name: array}: the worker's own arrays, updated
            ps.push(grads(p, batch))     # {name: gradient}; returns at once
        ps.close()
    ps.stats()                           # every rank: staleness histogram, waits, updates
    ps.params                            # every worker: the final parameters

Servers are the last S ranks (`servers=`, else HVLITE_PS_SERVERS / `hvliterun --servers S`,
else 1). Modes: "sync" (bulk synchronous, the same math as all-reduce), "async" (Downpour:
every push applied at arrival), "ssp" with staleness=k (a worker at clock c waits until the
slowest has reached c - k). A rank whose exception escapes after init() tells the others and
ends the job (MPI_Abort), so a failure on one rank is an error on all of them, not a hang.
"""
from hvlite.errors import PSError
from hvlite.ps.parameter_server import (ParameterServer, check_settings, check_optimizer,
                                        init, merge_stats)
from hvlite.ps.protocol import MODES

__all__ = ["init", "ParameterServer", "PSError", "MODES", "check_settings", "check_optimizer",
           "merge_stats"]
