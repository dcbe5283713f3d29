# Stub for the compiled lean module: the global set's commonest call in one C call, and the
# sets' automatic names.
from typing import Any, Callable

class NameCycle:      # one kind's names, in turn (taken from C)
    ...

class AutoNames:
    mark: str
    count: int
    def __init__(self, mark: str, count: int) -> None: ...
    # The next automatic name of this kind: "<kind><mark><k>", k cycling through count.
    def __call__(self, kind: str) -> str: ...

class Lean:
    def __init__(self, coordinator: Any, ops: type, process_set: Any, namer: AutoNames,
                 outputs: Any, pooled: int,
                 algorithm_code: Callable[[str | None], int], algorithms: dict,
                 handle: Callable[[Any, Any, str], Any]) -> None: ...
    # The output array (sync) or a handle (async); None: the general path takes the call.
    def allreduce(self, x: Any, op: Any, name: str | None, algorithm: str | None,
                  process_set: Any, inplace: bool) -> Any | None: ...
    def allreduce_async(self, x: Any, op: Any, name: str | None, algorithm: str | None,
                        process_set: Any, inplace: bool) -> Any | None: ...
