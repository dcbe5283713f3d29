"""Hierarchical all-reduce: within the node, then across nodes, then within the node again.

When every node has the same number of ranks L (the usual case), it runs per slice:
ring reduce-scatter inside the node leaves local rank i owning slice (i+1) mod L; the ranks that
own the same slice on different nodes all-reduce it across nodes in parallel (`cross` holds the
ranks with the same local rank); a ring allgather inside the node completes the buffer.
Cost: the ring's within L at shared-memory α, β, plus cross_fn on n/L bytes among the nodes.
With uneven nodes the slices would not line up, so it falls back to leaders: binomial reduce to
local rank 0, all-reduce among the leaders, binomial broadcast inside the node.
"""
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.algorithms.p2p cimport block_start, comm_size, comm_rank
from hvlite._core.algorithms.ring cimport ring_owned_block, ring_reduce_scatter, ring_allgather
from hvlite._core.algorithms.tree cimport tree_reduce, tree_broadcast


cdef int hierarchical_allreduce(char* buf, size_t count, int dtype, int op,
                                MPI_Comm local, MPI_Comm cross, bint uniform,
                                allreduce_fn cross_fn, Scratch* s) noexcept nogil:
    cdef int nl = comm_size(local), lr = comm_rank(local), b, err
    cdef size_t es = dtype_size(dtype), off, length
    if uniform:
        err = ring_reduce_scatter(buf, count, dtype, op, local, s)
        if err:
            return err
        b = ring_owned_block(lr, nl)
        off = block_start(count, nl, b)
        length = block_start(count, nl, b + 1) - off
        if comm_size(cross) > 1:
            err = cross_fn(buf + off * es, length, dtype, op, cross, s)
            if err:
                return err
        return ring_allgather(buf, count, es, local)
    err = tree_reduce(buf, count, dtype, op, local, s)
    if err:
        return err
    if lr == 0 and comm_size(cross) > 1:
        err = cross_fn(buf, count, dtype, op, cross, s)
        if err:
            return err
    return tree_broadcast(buf, count * es, local)
