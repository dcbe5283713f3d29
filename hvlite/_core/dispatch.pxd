from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.p2p cimport Scratch
from hvlite._core.cost_model cimport CostModel
from hvlite._core.shm cimport ShmArea, ShmPiece
from hvlite._core.shm_direct cimport OutMap
from hvlite._core.calibrate cimport Calibration

# Everything an all-reduce needs, for code that runs without the GIL.
cdef struct Context:
    MPI_Comm comm
    MPI_Comm local
    MPI_Comm cross
    int rank
    int size
    int local_size
    int nodes
    bint uniform
    Scratch scratch
    CostModel model
    ShmArea shm          # the node's shared segment (shm.base NULL: none, e.g. HVLITE_SHM=0)
    bint shm_ok          # every node has one: shm and hierarchical-over-shm may run
    bint direct_ok       # one node whose ranks read each other's buffers (shm_direct.pyx)
    OutMap* outs         # then per node rank its output arena mapped here (arena.pyx), or NULL
    Calibration cal      # auto's measured picks per size class (calibrate.pyx)

# auto becomes the algorithm to run: the size class's pick, or while its trials run the next
# candidate in turn (calibrate.pyx). Every rank resolves the same calls in the same order, and
# after each call it resolved calls resolved_done (a collective while a trial is under way).
cdef int resolve_algorithm(Context* c, size_t nbytes, int algo, bint apart=*) noexcept nogil
cdef int resolved_done(Context* c) noexcept nogil
# auto's choice without measuring: the class's pick if measured, else the cost model's.
cdef int auto_choice(Context* c, size_t nbytes, bint apart=*) noexcept nogil
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
# products (the algorithm is always adasum.pyx's).
cdef int run_adasum(Context* c, char* buf, const size_t* counts, size_t ntensors,
                    int dtype) noexcept nogil
# Whether fused batches of `algorithm` go through the shared segment, and running one: each
# piece's input reduced into its output, Average divided as above.
cdef bint pieces_in_segment(Context* c, int algorithm) noexcept nogil
cdef int run_allreduce_pieces(Context* c, const ShmPiece* pieces, size_t npieces, size_t count,
                              int dtype, int op, long divisor) noexcept nogil
# options: (shm enabled, segment bytes, redundant-reduce limit, probe, calibrate: 0 off, 1 on,
# 2 on and rank 0 prints what it measured)
cdef int context_init(Context* c, object comm, object local, object cross, bint uniform,
                      int nodes, size_t segment_bytes, dict model, tuple options) except -1
cdef void context_free(Context* c) noexcept nogil
