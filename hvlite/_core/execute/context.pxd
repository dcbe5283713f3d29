"""The execution context: one set's communicators and everything its all-reduces share,
as plain C data for code that runs without the GIL (filled by dispatch.context_init)."""
from mpi4py.libmpi cimport MPI_Comm
from hvlite._core.algorithms.algorithm cimport Scratch
from hvlite._core.tuning.cost_model cimport CostModel
from hvlite._core.shm.segment cimport ShmArea
from hvlite._core.shm.cma cimport OutMap
from hvlite._core.tuning.calibrate cimport Calibration

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
    bint stamps          # the timeline records: items are stamped at each phase (else 0)
    bint direct_ok       # one node whose ranks read each other's buffers (shm/cma.pyx)
    bint ptracer_held    # this context holds cma's ptracer (released in context_free)
    OutMap* outs         # then per node rank its output arena mapped here (shm/arena.pyx), or NULL
    Calibration cal      # auto's measured picks per size class (tuning/calibrate.pyx)
    Calibration ways     # with direct_ok: per size class the segment's faster way, slots or
                         # direct (upper classes: batches in pieces), measured the same way
    Calibration ways_apart  # the same for lone buffers whose output is apart from their input
                         # (upper classes only): out of place the two ways cost otherwise
    bint apart           # the lone tensor running now is out of place on some rank (agreed)
    Calibration reads    # with direct_ok: per size class whether allgather (lower classes) and
                         # alltoall (upper) read large parts from their senders or copy them
                         # through the slots (shm/copy.pyx), measured the same way
