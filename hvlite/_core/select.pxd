# Algorithm codes; they travel between ranks in metadata checks: never renumber.
cdef enum Algorithm:
    ALG_AUTO = 0
    ALG_RING = 1
    ALG_RHD = 2
    ALG_TREE = 3
    ALG_HIERARCHICAL = 4
    ALG_MPI = 5
    ALG_RD = 6
    ALG_COUNT = 7

# Seconds per message (alpha) and per byte moved (beta), within a node and between nodes, and
# seconds per byte reduced (gamma).
cdef struct CostModel:
    double alpha_intra
    double beta_intra
    double alpha_inter
    double beta_inter
    double gamma

cdef double predict(int algo, double nbytes, int n, int nodes, int local_size,
                    const CostModel* m) noexcept nogil
cdef int choose(double nbytes, int n, int nodes, int local_size, bint uniform,
                const CostModel* m) noexcept nogil
