from libc.stdint cimport uint64_t
from mpi4py.libmpi cimport MPI_Comm

# A cached all-reduce small enough to ride in the round's agreement message: its cache slot,
# where its data sit in the message's region, and how to reduce them.
cdef struct Ride:
    int slot
    size_t offset
    size_t count
    int dtype
    int op

# All-reduce the round message [nwords bits | region of rbytes] in place (`other`: scratch of the
# same size): the bits are ANDed; a ride's data are reduced where both sides have its slot's
# ready bit. Returns an MPI error code, or HV_ERR_LOST from the liveness watch.
cdef int agree(MPI_Comm comm, char* msg, char* other, int nwords, size_t rbytes,
               const Ride* rides, int nrides) noexcept nogil
