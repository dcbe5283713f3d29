# Stub for the compiled dtypes module: NumPy dtypes to codes.h's dtype codes.
import numpy as np
from hvlite._core.codes import Names

NAMES: Names
# NAMES less the codes that are no array's dtype ("float32 as float16", "float32 as bfloat16")
ARRAY_NAMES: tuple[str, ...]

def code_of(dtype: np.dtype | type) -> int: ...
def size_of(code: int) -> int: ...
def supported_names() -> str: ...
