"""The one interface every all-reduce algorithm implements (ring, rhd, rd, tree, hierarchical,
the shared segment's): in place on `count` elements of `dtype`, reduced with `op` over `comm`,
receiving through the caller's scratch. 0 or an MPI / HV_ERR_* code; never holds the GIL."""
from mpi4py.libmpi cimport MPI_Comm

# Two receive segments used round-robin: one is filled by MPI while the other is reduced.
cdef struct Scratch:
    char* buf
    size_t seg_bytes

ctypedef int (*allreduce_fn)(char* buf, size_t count, int dtype, int op, MPI_Comm comm,
                             Scratch* s) noexcept nogil

# Out of place: input's all-reduce into buf, without copying input over first (ring, rhd).
ctypedef int (*allreduce_from_fn)(const char* input, char* buf, size_t count, int dtype, int op,
                                  MPI_Comm comm, Scratch* s) noexcept nogil
