from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.execute.context cimport Context
from hvlite._core.algorithms.algorithm cimport Scratch
from hvlite._core.tuning.cost_model cimport CostModel
from hvlite._core.shm.segment cimport ShmArea, ShmPiece
from hvlite._core.shm.cma cimport OutMap
from hvlite._core.tuning.calibrate cimport Calibration

# auto becomes the algorithm to run: the size class's pick, or while its trials run the next
# candidate in turn (tuning/calibrate.pyx). Every rank resolves the same calls in the same order, and
# after each call it resolved calls resolved_done with the call's outcome (a collective while
# a trial or a confirming window is under way; nothing after a failed call); returns the error.
cdef int resolve_algorithm(Context* c, size_t nbytes, int algo, bint apart=*) noexcept nogil
cdef int resolved_done(Context* c, int err) noexcept nogil
# auto's choice without measuring: the class's pick if measured, else the cost model's.
cdef int auto_choice(Context* c, size_t nbytes, bint apart=*) noexcept nogil
# Whether a calibration may time an all-reduce of nbytes submitted with `algorithm` (auto's
# class, or the shared segment's ways for a buffer of that size): then the copy of its data that
# rides with the vote is timed (ShmArea.pre_seconds) and counts in the call's time.
cdef bint carry_timed(Context* c, size_t nbytes, int algorithm, bint apart) noexcept nogil
# What calibration measured, for Python (with the GIL).
cdef dict calibration_table(const Calibration* cal, bint apart=*)
# In place. Average runs a Sum, then divides by `divisor` (the set's size: joined ranks count);
# Adasum goes to run_adasum as one tensor, whatever `algo` says.
cdef int run_allreduce(Context* c, char* buf, size_t count, int dtype, int op, int algo,
                       long divisor) noexcept nogil
# Out of place: input's all-reduce into buf (ring and rhd read input as they go; the others
# after a copy of input into buf). input == buf: run_allreduce.
cdef int run_allreduce_from(Context* c, const char* input, char* buf, size_t count, int dtype,
                            int op, int algo, long divisor) noexcept nogil
# Adasum, in place: `ntensors` tensors of counts[t] elements end to end, each with its own dot
# products (the algorithm is always algorithms/adasum.pyx's).
cdef int run_adasum(Context* c, char* buf, const size_t* counts, size_t ntensors,
                    int dtype) noexcept nogil
# Whether fused batches of `algorithm` go through the shared segment, and running one: each
# piece's input reduced into its output, Average divided as above (fused: a batch of several
# tensors, the same on every rank; the segment measures its ways apart for those, and for a lone
# tensor out of place on some rank, c.apart).
cdef bint pieces_in_segment(Context* c, int algorithm) noexcept nogil
cdef int run_allreduce_pieces(Context* c, const ShmPiece* pieces, size_t npieces, size_t count,
                              int dtype, int op, long divisor, bint fused) noexcept nogil
# On one node whose ranks may read each other: whether an allgather or alltoall of `nbytes`
# (its agreed size: the response's, the same on every rank) lets its large parts be read from
# their senders (shm/copy.pyx's direct reads) or copies them through the slots, per size class
# as measured on the job's calls; then read_way_done after the call, on every rank alike (a
# collective while its class is timed). read_way_slots: the class has settled on the slots
# (an express call's parts may then ride with the vote). `could`: some rank may read in such a
# call (shm/copy.pxd's thresholds on nbytes): else both ways are the slots, and nothing is timed.
cdef bint read_way(Context* c, size_t nbytes, bint alltoall, bint could) noexcept nogil
cdef int read_way_done(Context* c, int err) noexcept nogil
cdef bint read_way_slots(Context* c, size_t nbytes, bint alltoall) noexcept nogil
# options: (shm enabled, segment bytes, redundant-reduce limit, probe, calibrate: 0 off, 1 on,
# 2 on and rank 0 prints what it measured)
cdef int context_init(Context* c, object comm, object local, object cross, bint uniform,
                      int nodes, size_t segment_bytes, dict model, tuple options) except -1
cdef void context_free(Context* c) noexcept nogil
