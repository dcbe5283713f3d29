# Stub for the compiled codes module: the code tables of codes.h and the error choke point.
from typing import Any

class Names(tuple[str, ...]):
    def __new__(cls, names: Any) -> Names: ...
    def code(self, name: object, default: int | None = None) -> int | None: ...

COLLECTIVES: Names
DTYPES: Names
DTYPE_SIZES: tuple[int, ...]
OPS: Names
ALGORITHMS: Names
SHM_WAYS: Names
ERROR_KINDS: Names
OWN_ERRORS: dict[int, str]
PENDING: int
DONE: int
ERROR: int

def core_mpi() -> tuple[bool, str]: ...
def error_string(code: int) -> str: ...
def exception(kind: int, message: str | None, code: int = 0) -> Exception: ...
def raise_for_code(err: int) -> None: ...
