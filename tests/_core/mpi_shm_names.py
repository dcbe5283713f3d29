"""Rank side: a leader whose exclusive create of the segment fails unlinks nothing.

Rank 0 makes the name it is about to choose exist already (its random part and host name held
fixed), as another host's live segment sharing /dev/shm would; init must then report the shm
path unavailable with shm_open's error, and the other segment must still be there afterwards."""
import os
import secrets
import socket
import sys

import hvlite as hvd
from hvlite._core.shm import segment as shm

if int(os.environ.get("PMI_RANK", "0")) == 0:
    secrets.token_hex = lambda n=None: "f" * 16
    socket.gethostname = lambda: "otherhost"
    first = shm.segment_name(os.getpid()).decode()     # counter 1; init's first name is 2
    taken = first.replace(f"-{os.getpid()}-1-", f"-{os.getpid()}-2-")
    assert first.startswith(f"/hvlite-{os.getpid()}-1-otherhost-"), first
    path = "/dev/shm" + taken
    with open(path, "wb") as f:
        f.write(b"another host's live segment")
hvd.init()
info = hvd._current().engine.shm_info()
failures = []
if hvd.rank() == 0:
    if not os.path.exists(path):
        failures.append(f"{path} was removed by a rank that did not create it")
    else:
        os.unlink(path)
want = "File exists"
if info["available"] or want not in info["why"]:
    failures.append(f"rank {hvd.rank()}: shm {info}, expected unavailable: {want}")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from helpers import assert_everywhere  # noqa: E402
assert_everywhere(failures)
print(f"rank {hvd.rank()}: ok", flush=True)
hvd.shutdown()
