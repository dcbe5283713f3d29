# Stub for the compiled submission module: the options of one submitted collective.
from typing import Sequence

class Submission:
    collective: int
    dtype: int
    op: int
    root: int
    algorithm: int
    shape: tuple[int, ...] | None
    splits: Sequence[int] | None
    error: str | None
    inline: bool
    reused: bool
    def __init__(self, collective: int, dtype: int = 0, op: int = 0, root: int = 0,
                 algorithm: int = 0, shape: Sequence[int] | None = None,
                 splits: Sequence[int] | None = None, error: str | None = None,
                 inline: bool = False, reused: bool = False) -> None: ...
