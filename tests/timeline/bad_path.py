"""HVLITE_TIMELINE names a file rank 0 cannot write: init() raises ConfigError on every rank,
naming the path and the rank (tests/timeline/test_trace.py)."""
import hvlite as hvd

try:
    hvd.init()
    print("init returned", flush=True)
except hvd.ConfigError as e:
    print(f"ConfigError: {e}; initialized: {hvd.is_initialized()}", flush=True)
