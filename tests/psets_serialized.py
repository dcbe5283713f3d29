"""Rank side: below MPI_THREAD_MULTIPLE, creating a process set is refused on every rank."""
import hvlite as hvd

try:
    hvd.init(process_sets=[hvd.ProcessSet([0])])
except hvd.InvalidArgumentError as e:
    assert "MPI_THREAD_MULTIPLE" in str(e) and "MPI_THREAD_SERIALIZED" in str(e), e
    print("REFUSED", flush=True)
else:
    raise SystemExit("a process set was created at MPI_THREAD_SERIALIZED")
assert not hvd.is_initialized()     # init() failed as a whole, on every rank
hvd.init()                          # and works without the sets
assert hvd.allreduce([1.0]) == [1.0]
