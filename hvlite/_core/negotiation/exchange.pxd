# The MPI calls of a negotiation round; what the bytes mean is negotiation/wire.pyx's business.
from libc.stdint cimport uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from mpi4py.libmpi cimport MPI_Comm, MPI_Request
from libcpp.unordered_map cimport unordered_map
from hvlite._core.request cimport Request
from hvlite._core.negotiation.wire cimport Span

cdef int exchange_wait(MPI_Request* r) noexcept nogil
# Every rank sends payload; rank 0 gets spans[r] viewing rank r's bytes inside buf.
cdef int exchange_gather(MPI_Comm comm, int rank, int n, const string& payload, vector[char]& buf,
                          vector[Span]& spans) noexcept nogil
# Rank 0's resp to every rank (its length, then its bytes).
cdef int exchange_bcast(MPI_Comm comm, int rank, string& resp) noexcept nogil
# This rank's message to rank 0: its misses in submission order (rank 0 numbers names by first
# arrival, and that order becomes the execution and cache-slot order on every rank), then, when a
# stall report was asked for (stall), a probe per name it waits on.
cdef void submission_message(string& payload, unordered_map[string, Request*]& pending,
                             bint stopping, bint joined, bint stall, double now) noexcept nogil
