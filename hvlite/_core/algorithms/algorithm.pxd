"""The one interface every all-reduce algorithm implements (ring, rhd, rd, tree, hierarchical,
the shared segment's): in place on `count` elements of `dtype`, reduced with `op` over `comm`,
receiving through the caller's scratch. 0 or an MPI / HV_ERR_* code; never holds the GIL."""
from mpi4py.libmpi cimport MPI_Comm

# Two receive segments used round-robin: one is filled by MPI while the other is reduced.
cdef struct Scratch:
    char* buf
    size_t seg_bytes
    long divisor         # > 1: an Average's last pass; each element is divided by it once, by
                         # the rank that finished reducing it (ring, rhd, rd, tree), before it
                         # is copied to the others: the same bits everywhere, a 1/N share of the
                         # division per rank. Set by the caller around one call, else 0.

ctypedef int (*allreduce_fn)(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                             Scratch* s) noexcept nogil

# Out of place: input's all-reduce into buf, without copying input over first (ring, rhd).
ctypedef int (*allreduce_from_fn)(const char* input, char* buf, size_t count, int dtype, int op,
                                  MPI_Comm comm, Scratch* s) noexcept nogil
