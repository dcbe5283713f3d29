# The MPI calls of a negotiation round; what the bytes mean is negotiation/wire.pyx's business.
from libc.stdint cimport uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from mpi4py.libmpi cimport MPI_Comm, MPI_Request
from hvlite._core.negotiation.wire cimport Span

cdef int transport_wait(MPI_Request* r) noexcept nogil
# Every rank sends payload; rank 0 gets spans[r] viewing rank r's bytes inside buf.
cdef int transport_gather(MPI_Comm comm, int rank, int n, const string& payload, vector[char]& buf,
                          vector[Span]& spans) noexcept nogil
# Rank 0's resp to every rank (its length, then its bytes).
cdef int transport_bcast(MPI_Comm comm, int rank, string& resp) noexcept nogil
