from libc.stdint cimport uint64_t
from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.algorithms.algorithm cimport Scratch, allreduce_fn
from hvlite._core.kernels.stream cimport hv_prefetch

# Batches from this many bytes write new outputs past the cache (non-temporal stores); below it
# the outputs a pool hands back are still cached and ordinary stores are faster (1 MiB out of
# place: 1.15x), above it each line would first be read from memory (16-32 MiB: 1.1x the other
# way; 2 ranks, docs/benchmarks.md).
cdef enum:
    SHM_STREAM_MIN = 8 << 20

# A segment shared by the L ranks of one node: a control page with one epoch counter per rank,
# then two slots per rank (by epoch parity) and two result areas, each `seg` bytes.
cdef struct ShmArea:
    char* base           # NULL: unavailable (then `why` says why)
    size_t map_bytes
    size_t seg           # bytes per pipeline segment, a multiple of 64
    int L                # ranks on the node
    int me               # this rank's index among them
    long long epoch      # barriers passed; the same on every rank of the node
    size_t redundant_max # up to this many bytes per segment every rank reduces everything
    int lost             # HV_ERR_LOST once a barrier's watch found a peer lost (barriers stop waiting)
    long long slept      # barrier waits that reached the sleep stage on a late rank's epoch
    long long woken      # futex waits that a wake-up ended
    long long woke       # barriers where this rank found sleepers on its epoch and woke them
    long long pre_epoch  # the barrier whose slots carry every rank's part of the next copy-in
                         # beside the vote (shm_preload); -1: none
    size_t pre_bytes     # that copy-in's size (0: each rank's own), and where it lies in a slot
    size_t pre_off
    double pre_seconds   # what putting this rank's part beside the vote took, where a calibration
                         # may time the collective (else 0): its copy-in, done before the timing
    double credit        # pre_seconds of the copy-in the collective under way used (shm_preloaded),
                         # which the timing adds (execute/dispatch.pyx); 0: none
    long long carried    # copy-ins that rode with the vote: a barrier each saved
    bint direct          # every node rank can read the others' memory (shm/cma.pyx), agreed
    long long read_direct  # allgathers and alltoalls that read a peer's buffer
    void* direct_scratch # the direct all-reduce's tables, iovecs and chunk buffers (shm/cma.pyx):
                         # made once and kept, not allocated per call
    char why[160]

# Allocate and map (collective over `local`); on failure area.base stays NULL. Never raises.
cdef int shm_open_area(ShmArea* a, object local, size_t seg_bytes, size_t redundant_max,
                       bint enabled) except -1
cdef void shm_close_area(ShmArea* a) noexcept nogil
cdef void shm_set_why(ShmArea* a, str why)

# In place over the node; with `cross` (size > 1) the node's partial result is all-reduced among
# the nodes with cross_fn: per slice (uniform nodes) or by the leaders (uneven nodes).
# divisor > 1: the last pass of an Average (op is then the kernel op, Sum): on one node each
# result chunk is divided while still in L1; across nodes the cross algorithm divides each
# element of the nodes' sum where it finishes it.
cdef int shm_allreduce(char* buf, size_t count, int dtype, int op, ShmArea* a,
                       MPI_Comm cross, bint uniform, allreduce_fn cross_fn, Scratch* s,
                       long divisor) noexcept nogil

# One tensor of a fused batch: elements [start, start + count) of the batch. input NULL: the
# op's identity (a rank that has joined); output NULL: the result is not kept.
cdef struct ShmPiece:
    const char* input
    char* output
    size_t start
    size_t count

# A fused batch straight through the segment, segment by segment: each segment is gathered from
# the tensors' inputs into this rank's slot and the reduced result scattered into their outputs;
# no fusion buffer. Single node only (HV_ERR_SHM where there is no segment).
cdef int shm_allreduce_pieces(const ShmPiece* p, size_t np, size_t count, int dtype, int op,
                              ShmArea* a, long divisor) noexcept nogil

# words[i] = AND over the node's ranks of their words[i] (collective over the node; n * 8 bytes
# must fit a slot): one barrier, no MPI call. tag: 0, or a word that stands for the words (equal
# tags only for equal words): peers with this rank's tag are not read. Returns HV_ERR_LOST once a
# peer is lost.
cdef int shm_and_words(ShmArea* a, uint64_t* words, int n, uint64_t tag) noexcept nogil

# Data riding with the vote: a rank puts its part of the next collective's first copy-in (src
# NULL: it has none, a broadcast's non-root) beside the n words it will vote with (`at` bytes
# into the room after them), in the slot the vote's barrier publishes; shm_preload_room says
# how much fits (0: nothing). Once the agreement says every rank did so for the same
# collective (an agreed flag), shm_arm_preload makes the next copy-in of nbytes read the slots
# of that barrier instead of copying and taking a barrier of its own (shm_preloaded: once, on
# every rank alike); shm_disarm after the collective, whichever way it went.
cdef size_t shm_preload_room(ShmArea* a, int n) noexcept nogil
cdef void shm_preload(ShmArea* a, int n, size_t at, const char* src, size_t nbytes) noexcept nogil
cdef void shm_arm_preload(ShmArea* a, int n, size_t nbytes) noexcept nogil
cdef void shm_disarm(ShmArea* a) noexcept nogil
# Whether the next copy-in of nbytes (0: of a size each rank knows for itself) rode with the vote
# (then it is used up); shm_carried(r): where node rank r's part lies then.
cdef bint shm_preloaded(ShmArea* a, size_t nbytes) noexcept nogil
cdef char* shm_carried(ShmArea* a, int r) noexcept nogil

# Seconds per flag barrier, a median of blocks (collective over the node): the cost model's alpha_shm.
cdef double shm_barrier_seconds(ShmArea* a, int reps) noexcept nogil

# For the node's other collectives (shm/copy.pyx): rank r's slot of a parity, and one flag
# barrier (HV_ERR_LOST once a peer is lost). A slot of parity (epoch + 1) & 1 is written before
# the next barrier and read after it.
cdef char* shm_slot(ShmArea* a, int r, int parity) noexcept nogil
cdef int shm_barrier(ShmArea* a) noexcept nogil
# dst = slot_0 op ... op slot_{L-1} over elements [offset, offset + count) of a parity's slots,
# this rank's part read from `own` instead (when not NULL), divided by divisor when > 1; chunk by
# chunk in L1.
cdef void shm_reduce_slots(ShmArea* a, int parity, size_t offset, size_t count, int dtype, int op,
                           const char* own, char* dst, long divisor) noexcept nogil
# A batch's elements [a, b) between its pieces and a contiguous buffer: inputs gathered into dst
# (the op's identity where a piece has none), or src scattered into the outputs (with `stream`,
# non-temporal stores into outputs that are not their inputs, prefetching `ahead`, or NULL).
cdef void shm_gather(const ShmPiece* p, size_t np, size_t a, size_t b, char* dst, int dtype,
                     int op) noexcept nogil
cdef void shm_scatter(const ShmPiece* p, size_t np, size_t a, size_t b, const char* src,
                      int dtype, bint stream, hv_prefetch* ahead) noexcept nogil
# Where rank j's 1/L slice of a count-element buffer starts (64-byte aligned; j = L: count).
cdef size_t shm_slice_start(size_t count, int L, int j, size_t es) noexcept nogil
# Where each node rank's liveness beat lives (one word per rank, `stride` bytes apart), or NULL.
cdef char* shm_beats(ShmArea* a, size_t* stride) noexcept nogil
# How many of the node's threads are counted asleep on this rank's epoch now (tests).
cdef int shm_sleepers(ShmArea* a) noexcept nogil
