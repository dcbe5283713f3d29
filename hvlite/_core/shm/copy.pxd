from libc.stdint cimport int64_t
from libcpp.vector cimport vector
from hvlite._core.shm.segment cimport ShmArea

# From this many bytes a broadcast is faster through MPI_Bcast than in two copies through the
# slots (MPICH, 2 ranks, × MPI_Bcast's own time: through the slots 0.62 at 4 MiB, 0.83-0.85 at
# 8, 1.36-1.67 at 16, 1.10-1.18 at 64; through hvlite's MPI path 1.02-1.16 at each;
# docs/benchmarks.md). allgather and alltoall stay on the segment at every size: through
# hvlite's MPI path (MPI_Iallgatherv, MPI_Ialltoallv) 16-64 MiB took 1.3-1.5x longer.
cdef enum:
    SHM_COPY_MAX = 16 << 20
    # From this many bytes that a peer reads from one rank (an allgather's block; an alltoall's
    # part, scaled below) the bytes stay in the rank's buffer and its peers read them there,
    # where ShmArea.direct (copy.pyx). Below, two copies through the
    # slots with no barrier of their own cost as much (2 ranks, Intel MPI's library, x
    # MPI_Allgather's time: 8 KiB a rank 1.64-1.68 read, 1.52-1.81 through the slots; 16 KiB
    # 1.14-1.51 read, 1.82 through the slots; docs/benchmarks.md)
    DIRECT_COPY_MIN = 16 << 10

# Whether an allgather block of `nbytes` is read from its sender. Only on two-rank nodes: there
# it saves a third of the copies; with L ranks the reads save one copy in L + 1 and cost a
# barrier and a kernel call per peer (4 ranks on 2 cores: 256 KiB 55 us through the slots, 89
# read). (A broadcast is never read: docs/benchmarks.md.)
cdef inline bint direct_whole(ShmArea* a, size_t nbytes) noexcept nogil:
    return a.direct and a.L == 2 and nbytes >= DIRECT_COPY_MIN

# Whether an alltoall sending `nbytes` in all leaves its parts to be read: on any node, from
# (L - 1) x DIRECT_COPY_MIN a part on average. It saves half the copies (4 ranks on 2 cores:
# 4 MiB 1,675-1,811 us through the slots, 1,126-1,217 read), but with more ranks each read
# costs more (there parts of 16 KiB took 24-33 us through the slots, 36-46 read).
cdef inline bint direct_parts(ShmArea* a, size_t nbytes) noexcept nogil:
    return a.direct and nbytes >= <size_t>a.L * <size_t>(a.L - 1) * DIRECT_COPY_MIN

# Collective over the node's ranks (the whole set); HV_ERR_LOST once a peer is lost. allgather
# and alltoall write their result into `into` when it is exactly into_bytes long (memory.pxd).
cdef int shm_broadcast(ShmArea* a, char* buf, size_t nbytes, int root) noexcept nogil
cdef int shm_allgather(ShmArea* a, const char* input, int64_t rows, size_t row_bytes,
                       char** result, int64_t* total_rows, vector[int64_t]& all_rows,
                       bint same_rows, char* into, size_t into_bytes) noexcept nogil
# An allgather's part that rides with the express round's vote of n words (segment.pxd's
# shm_preload): its count, then its `nbytes` of rows. Returns what shm_allgather then looks for
# (shm_preloaded), 0 where they do not fit beside the vote.
cdef size_t shm_allgather_carry(ShmArea* a, int n, const char* input, int64_t rows,
                                size_t nbytes) noexcept nogil
# An alltoall's splits and parts that ride with the vote, laid out as shm_alltoall's slot;
# nonzero where every part fits one round there (splits as shm_alltoall takes them).
cdef size_t shm_alltoall_carry(ShmArea* a, int n, const char* input, int64_t rows,
                               const vector[int64_t]& splits, size_t row_bytes) noexcept nogil
# This rank's `rows` rows in `splits` parts, part j to rank j (mpi_collectives' alltoall); the result
# allocated here at its final size, recv_splits[r] the rows rank r sent here. HV_ERR_SHM (every
# rank, before any exchange): the slots are too small for a part per rank; take MPI's path.
cdef int shm_alltoall(ShmArea* a, const char* input, int64_t rows, const vector[int64_t]& splits,
                      size_t row_bytes, char** result, vector[int64_t]* recv_splits, char* into,
                      size_t into_bytes) noexcept nogil
