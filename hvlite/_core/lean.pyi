# Stub for the compiled lean module: the global set's commonest call in one C call.
from typing import Any, Callable

class Lean:
    def __init__(self, coordinator: Any, ops: type, process_set: Any,
                 namer: Callable[[str], str], take: Callable[[str, Any, bool], Any],
                 algorithm_code: Callable[[str | None], int], algorithms: dict,
                 handle: Callable[[Any, Any, str], Any], mark: str) -> None: ...
    # The output array (sync) or a handle (async); None: the general path takes the call.
    def allreduce(self, x: Any, op: Any, name: str | None, algorithm: str | None,
                  process_set: Any, inplace: bool) -> Any | None: ...
    def allreduce_async(self, x: Any, op: Any, name: str | None, algorithm: str | None,
                        process_set: Any, inplace: bool) -> Any | None: ...
