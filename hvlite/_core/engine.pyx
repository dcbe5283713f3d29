"""The direct path (Engine): the runtime's communicators, its persistent scratch, and algorithm dispatch.

Everything below runs without the GIL; errors go through codes.check, the one place where a
core error code becomes a Python exception (MPI's own error string included).
"""
from libc.stdint cimport int64_t
cimport numpy as cnp
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.codes cimport HV_MISMATCH, check as chkerr
from hvlite._core.tuning.cost_model cimport choose
from hvlite._core.codes cimport ALG_AUTO
from hvlite._core.execute.context cimport Context
from hvlite._core.execute.dispatch cimport (context_init, context_free, resolve_algorithm,
                                    run_allreduce, auto_choice, calibration_table,
                                    resolved_done)

cnp.import_array()

cdef enum:
    META = 5          # count, dtype, op, algorithm, local-error flag


from hvlite._core.codes import error_string, raise_for_code   # noqa: F401  (the choke point)


cdef class Engine:
    """Direct, synchronous access to the algorithms on the runtime's communicators (the
    benchmarks use it; jobs go through the coordinator). Not for use while the coordinator runs
    work on the same communicator."""
    cdef Context ctx
    cdef readonly int rank, size, local_rank, local_size, cross_rank, cross_size, nodes
    cdef readonly bint uniform

    def __cinit__(self):
        self.ctx.scratch.buf = NULL

    def __init__(self, comm, local, cross, bint uniform, int nodes, size_t segment_bytes,
                 dict cost_model, tuple options=(False, 0, 0, False, 0)):
        context_init(&self.ctx, comm, local, cross, uniform, nodes, segment_bytes, cost_model, options)
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        self.cross_rank, self.cross_size = cross.Get_rank(), cross.Get_size()
        self.uniform, self.nodes = uniform, nodes

    def close(self):
        context_free(&self.ctx)

    def cost_model(self):
        """The model auto decides with (alpha_shm measured here when the probe is on)."""
        return self.ctx.model

    def shm_info(self):
        """The shared segment: whether shm may run, its segment size, whether the all-reduce
        reads the peers' buffers directly (one node, the kernel allowing it), and why not when
        shm may not run."""
        return {"available": bool(self.ctx.shm_ok), "segment_bytes": self.ctx.shm.seg if self.ctx.shm.seg < (1 << 62) else 0,
                "mapped_bytes": self.ctx.shm.map_bytes, "ranks": self.ctx.shm.L,
                "redundant_bytes": self.ctx.shm.redundant_max,
                "direct": bool(self.ctx.direct_ok),
                "why": "" if self.ctx.shm_ok else self.ctx.shm.why.decode("utf-8", "replace")}

    def __dealloc__(self):
        context_free(&self.ctx)

    def choose(self, double nbytes):
        """The algorithm auto picks for a buffer of nbytes on this runtime's topology (the
        measured pick once its size class has run, else the cost model's; measures nothing)."""
        return auto_choice(&self.ctx, <size_t>nbytes)

    def calibration(self):
        """What auto measured on this engine, per size class (dispatch.calibration_table)."""
        return calibration_table(&self.ctx.cal)

    cdef int _agree(self, int64_t* meta) noexcept nogil:
        """MPI_Allreduce(MAX) of (v, -v) pairs: every rank learns whether all metadata agree."""
        cdef int64_t buf[2 * META]
        cdef int i, err
        for i in range(META):
            buf[2 * i] = meta[i]
            buf[2 * i + 1] = -meta[i]
        err = MPI_Allreduce(MPI_IN_PLACE, buf, 2 * META, MPI_INT64_T, MPI_MAX, self.ctx.comm)
        if err:
            return err
        for i in range(META):
            if buf[2 * i] != -buf[2 * i + 1]:
                return HV_MISMATCH
        return 0

    def allreduce(self, cnp.ndarray arr, int dtype, int op, int algo, bint check):
        """Reduce a C-contiguous array in place. Returns the algorithm that ran, or -1 when the
        ranks' metadata disagree (then nothing was touched)."""
        cdef char* buf = <char*>cnp.PyArray_DATA(arr)
        cdef size_t count = <size_t>cnp.PyArray_SIZE(arr)
        cdef int err = 0, done
        cdef int64_t meta[META]
        with nogil:
            if check:
                meta[0] = <int64_t>count
                meta[1] = dtype
                meta[2] = op
                meta[3] = algo
                meta[4] = 0
                err = self._agree(meta)
            if err == 0:
                algo = resolve_algorithm(&self.ctx, count * dtype_size(dtype), algo)
                err = run_allreduce(&self.ctx, buf, count, dtype, op, algo, self.ctx.size)
                err = resolved_done(&self.ctx, err)
        if err == HV_MISMATCH:
            return -1
        chkerr(err)
        return algo
