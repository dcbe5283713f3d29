# Algorithm codes: ALG_* in codes.h.
from hvlite._core.codes cimport *

# Seconds per message (alpha) and per byte moved (beta), within a node and between nodes,
# seconds per byte reduced (gamma), and for the shared-memory algorithm: seconds per flag
# barrier (alpha_shm) and per byte copied by memcpy (beta_mem); shm_direct: the node's ranks
# read each other's buffers (shm/cma.pyx), which takes fewer passes over memory.
cdef struct CostModel:
    double alpha_intra
    double beta_intra
    double alpha_inter
    double beta_inter
    double gamma
    double alpha_shm
    double beta_mem
    bint shm_direct

cdef double predict(int algo, double nbytes, int n, int nodes, int local_size,
                    const CostModel* m) noexcept nogil
# Whether auto may run algo on this topology (shm: every node has a shared segment).
cdef bint eligible(int algo, int nodes, int local_size, bint uniform, bint shm) noexcept nogil
# shm: every node has a shared segment (then shm, and hierarchical over it, are candidates).
cdef int choose(double nbytes, int n, int nodes, int local_size, bint uniform, bint shm,
                const CostModel* m) noexcept nogil
