"""What a commit's body holds, and how it is read back without running code.

A commit is the state's snapshot pickled, and reading it back is where a planted or tampered
file could run code (pickle calls whatever global a file names). So the reader is restricted,
as `torch.load(weights_only=True)` is: it builds only

* builtin scalars and containers (None, bool, int, float, complex, str, bytes, bytearray, list,
  tuple, dict, set, frozenset, slice, range) and collections.OrderedDict;
* NumPy arrays, scalars and dtypes (through NumPy's own reconstruct functions; an array of
  dtype object holds only what this list allows);
* values of types registered with `register()`: hvlite.torch registers torch tensors, written as
  their dtype, shape and raw bytes (a NumPy uint8 array), not as torch's own pickle.

Any other global in a commit raises CommitError naming the file and the global, before anything
is built from it. A state that needs other objects (arbitrary attributes of an ObjectState)
opts in with `trusted=True`: its commits are then read with the full unpickler, which runs
whatever code the file names, so a commit directory another user (or a compromised job) can
write must not be used with it (docs/security.md). The writer checks the same list when the
state is not trusted, so a commit it could not read back fails at commit(), not at a relaunch.
"""
import collections
import importlib
import io
import pickle
import warnings

import numpy as np

from hvlite.elastic.store import CommitError, frame, unframe

# (module, name) a commit may name: builtins the pickle opcodes do not cover, and NumPy's
# reconstruct functions under their NumPy 2 and NumPy 1 module names
SAFE_GLOBALS = frozenset({
    ("builtins", "complex"), ("builtins", "set"), ("builtins", "frozenset"),
    ("builtins", "bytearray"), ("builtins", "slice"), ("builtins", "range"),
    ("collections", "OrderedDict"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
})
_SAFE_TYPES = (np.ndarray, np.generic, np.dtype, complex, bytearray, set, frozenset, slice,
               range, collections.OrderedDict)
TRUSTED_HINT = ("pass trusted=True to the state to allow arbitrary objects in commits "
                "(they are then read with the full unpickler: docs/elastic.md#what-a-commit-holds)")



def _resolve(pairs):
    """The objects SAFE_GLOBALS names that exist here (the writer allows exactly these)."""
    found = []
    for module, name in pairs:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")      # numpy.core under NumPy 2 is deprecated
                found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            pass
    return found


_SAFE_OBJECTS = None
_registry = {}          # tag -> (type, encode(obj) -> plain data, decode(plain data) -> obj)


def register(tag, cls, encode, decode):
    """Let commits hold instances of `cls`: written as ("tag", encode(obj)), where encode
    returns plain data (what this module allows), and read back as decode(that data)."""
    _registry[tag] = (cls, encode, decode)


def _safe(obj):
    global _SAFE_OBJECTS
    if type(obj) in _SAFE_TYPES or isinstance(obj, (np.generic, np.dtype)):
        return True
    if _SAFE_OBJECTS is None:
        _SAFE_OBJECTS = _resolve(SAFE_GLOBALS)
    return any(obj is o for o in _SAFE_OBJECTS)


class _Writer(pickle.Pickler):
    def __init__(self, f, trusted):
        super().__init__(f, protocol=5)
        self.trusted = trusted

    def persistent_id(self, obj):
        for tag, (cls, encode, _) in _registry.items():
            if isinstance(obj, cls):
                return (tag, encode(obj))
        return None

    def reducer_override(self, obj):
        if not self.trusted and not _safe(obj):
            raise _Unsafe(obj)
        return NotImplemented


class _Unsafe(Exception):
    def __init__(self, obj):
        super().__init__(obj)
        self.obj = obj


def _describe(obj):
    t = obj if isinstance(obj, type) else type(obj)
    what = "the class" if isinstance(obj, type) else (
        "the function" if callable(obj) and hasattr(obj, "__qualname__") else "a")
    name = getattr(obj, "__qualname__", None) if what == "the function" else None
    return f"{what} {t.__module__}.{name or t.__qualname__}"


def _where(root, target, path="state"):
    """The path of `target` inside dicts, lists and tuples under `root`, or None."""
    if root is target:
        return path
    items = root.items() if isinstance(root, dict) else (
        enumerate(root) if isinstance(root, (list, tuple)) else ())
    for key, value in items:
        found = _where(value, target, f"{path}[{key!r}]")
        if found:
            return found
    return None


def dumps(state, trusted=False):
    """The body of a commit of `state`. Unless `trusted`, an object outside the allow-list
    raises CommitError naming it and where in the state it is."""
    buf = io.BytesIO()
    try:
        _Writer(buf, trusted).dump(state)
    except _Unsafe as e:
        where = _where(state, e.obj)
        raise CommitError(f"cannot commit {_describe(e.obj)}" + (f" at {where}" if where else "")
                          + f": a commit holds NumPy arrays, plain Python data and tensors; "
                          f"{TRUSTED_HINT}") from None
    return buf.getbuffer()


class _Reader(pickle.Unpickler):
    def __init__(self, f, trusted, source):
        super().__init__(f)
        self.trusted, self.source = trusted, source

    def find_class(self, module, name):
        if self.trusted or (module, name) in SAFE_GLOBALS:
            return super().find_class(module, name)
        raise CommitError(f"{self.source}: refused: the commit names the global "
                          f"{module}.{name}, which a commit may not load (a file planted or "
                          "altered, or a commit of a state made with trusted=True: only a state "
                          "with trusted=True reads it, and that runs what the file names)")

    def persistent_load(self, pid):
        try:
            tag, data = pid
            _, _, decode = _registry[tag]
        except (TypeError, ValueError, KeyError):
            what = repr(pid[0])[:60] if isinstance(pid, tuple) and pid else "an unknown record"
            raise CommitError(f"{self.source}: the commit holds {what}, which nothing loaded "
                              "here can read (e.g. torch tensors need hvlite.torch imported)") \
                from None
        return decode(data)


def loads(body, trusted=False, source="commit"):
    """The state in a commit's body. Unless `trusted`, only the allow-list is built; anything
    wrong raises CommitError naming `source`."""
    try:
        return _Reader(io.BytesIO(body), trusted, source).load()
    except CommitError:
        raise
    except Exception as e:
        raise CommitError(f"{source}: cannot read the commit: {type(e).__name__}: {e}") from None


def encode(meta, state, trusted=False):
    """A commit file's chunks (hvlite/elastic/store.py's frame): header `meta`, body `state`."""
    return frame(meta, dumps(state, trusted))


def decode(data, trusted=False, source="commit"):
    """(metadata, state) of a commit file's bytes: the frame checked, then the body read."""
    meta, body = unframe(data, source)
    return meta, loads(body, trusted, source)
