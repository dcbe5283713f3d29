"""The engine: the runtime's communicators, its persistent scratch, and algorithm dispatch.

Everything below runs without the GIL; this module is the one place where a core error code
becomes a Python exception (MPI's own error string included).
"""
from libc.stdlib cimport free
from libc.stdint cimport int64_t
cimport numpy as cnp
from mpi4py.libmpi cimport *
cimport mpi4py.MPI as MPI
from hvlite._core.dtypes cimport dtype_size
from hvlite._core.reduce cimport OP_SUM, OP_AVERAGE, divide_by
from hvlite._core.p2p cimport Scratch, allreduce_fn, HV_ERR_NOMEM
from hvlite._core.select cimport *
from hvlite._core.ring cimport ring_allreduce
from hvlite._core.rhd cimport rhd_allreduce
from hvlite._core.rd cimport rd_allreduce
from hvlite._core.tree cimport tree_allreduce
from hvlite._core.hierarchical cimport hierarchical_allreduce
from hvlite._core.mpiref cimport mpi_allreduce

cnp.import_array()

cdef extern from "stdlib.h" nogil:
    void* aligned_alloc(size_t alignment, size_t size)

cdef enum:
    HV_MISMATCH = -100
    META = 5          # count, dtype, op, algorithm, local-error flag


cdef allreduce_fn _flat_fn(int algo) noexcept nogil:
    if algo == ALG_RING:
        return ring_allreduce
    if algo == ALG_RHD:
        return rhd_allreduce
    if algo == ALG_RD:
        return rd_allreduce
    return tree_allreduce


def error_string(int code):
    cdef char msg[1024]
    cdef int n = 0
    if code == HV_ERR_NOMEM:
        return "out of memory allocating request or scratch space"
    if MPI_Error_string(code, msg, &n) != MPI_SUCCESS:
        return f"unknown MPI error {code}"
    return msg[:n].decode("utf-8", "replace")


def raise_for_code(int code):
    """Raise what the core raises for this error code (tests use it with MPI's error classes)."""
    _check(code)


cdef int _check(int err) except -1:
    if err == 0:
        return 0
    from hvlite.errors import MPIError
    raise MPIError(err, error_string(err))


cdef class Engine:
    cdef MPI_Comm comm, local, cross
    cdef readonly int rank, size, local_rank, local_size, cross_rank, cross_size, nodes
    cdef readonly bint uniform
    cdef Scratch scratch
    cdef CostModel model

    def __cinit__(self):
        self.scratch.buf = NULL

    def __init__(self, MPI.Comm comm, MPI.Comm local, MPI.Comm cross, bint uniform, int nodes,
                 size_t segment_bytes, dict cost_model):
        self.comm, self.local, self.cross = comm.ob_mpi, local.ob_mpi, cross.ob_mpi
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        self.cross_rank, self.cross_size = cross.Get_rank(), cross.Get_size()
        self.uniform, self.nodes = uniform, nodes
        self.model = cost_model
        self.scratch.seg_bytes = (segment_bytes + 63) // 64 * 64
        self.scratch.buf = <char*>aligned_alloc(64, 2 * self.scratch.seg_bytes)
        if self.scratch.buf == NULL:
            raise MemoryError("hvlite: cannot allocate the scratch segments")

    def close(self):
        free(self.scratch.buf)
        self.scratch.buf = NULL

    def __dealloc__(self):
        free(self.scratch.buf)

    def choose(self, double nbytes):
        """The algorithm auto picks for a buffer of nbytes on this runtime's topology."""
        return choose(nbytes, self.size, self.nodes, self.local_size, self.uniform, &self.model)

    cdef int _agree(self, int64_t* meta) noexcept nogil:
        """MPI_Allreduce(MAX) of (v, -v) pairs: every rank learns whether all metadata agree."""
        cdef int64_t buf[2 * META]
        cdef int i, err
        for i in range(META):
            buf[2 * i] = meta[i]
            buf[2 * i + 1] = -meta[i]
        err = MPI_Allreduce(MPI_IN_PLACE, buf, 2 * META, MPI_INT64_T, MPI_MAX, self.comm)
        if err:
            return err
        for i in range(META):
            if buf[2 * i] != -buf[2 * i + 1]:
                return HV_MISMATCH
        return 0

    def agree(self, int64_t count, int dtype, int op, int algo, bint local_error):
        """Collective metadata check. Returns 0 when every rank passed the same metadata and
        none failed locally, 1 when they disagree, 2 when all agree but all failed locally."""
        cdef int64_t meta[META]
        meta[:] = [count, dtype, op, algo, local_error]
        cdef int err
        with nogil:
            err = self._agree(meta)
        if err == HV_MISMATCH:
            return 1
        _check(err)
        return 2 if local_error else 0

    def allreduce(self, cnp.ndarray arr, int dtype, int op, int algo, bint check):
        """Reduce a C-contiguous array in place. Returns the algorithm that ran, or -1 when the
        ranks' metadata disagree (nothing was touched; call agree-details to name the culprit)."""
        cdef char* buf = <char*>cnp.PyArray_DATA(arr)
        cdef size_t count = <size_t>cnp.PyArray_SIZE(arr)
        cdef int err = 0
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
                if algo == ALG_AUTO:
                    algo = choose(<double>(count * dtype_size(dtype)), self.size, self.nodes,
                                  self.local_size, self.uniform, &self.model)
                err = self._run(buf, count, dtype, op, algo)
        if err == HV_MISMATCH:
            return -1
        _check(err)
        return algo

    cdef int _run(self, char* buf, size_t count, int dtype, int op, int algo) noexcept nogil:
        cdef int kernel_op = OP_SUM if op == OP_AVERAGE else op
        cdef int err
        cdef double nbytes
        if count == 0 or self.size == 1:
            return 0
        if algo == ALG_MPI:
            err = mpi_allreduce(buf, count, dtype, kernel_op, self.comm)
        elif algo == ALG_HIERARCHICAL:
            # The cross-node algorithm must be the same on every rank that runs it, so it is
            # chosen from values all ranks share: the slice size when nodes are equal (then
            # local_size is the same everywhere), else the whole buffer the leaders reduce.
            nbytes = <double>(count * dtype_size(dtype))
            if self.uniform:
                nbytes /= self.local_size
            err = hierarchical_allreduce(
                buf, count, dtype, kernel_op, self.local, self.cross, self.uniform,
                _flat_fn(choose(nbytes, self.nodes, 1, 1, True, &self.model)), &self.scratch)
        else:
            err = _flat_fn(algo)(buf, count, dtype, kernel_op, self.comm, &self.scratch)
        if err == 0 and op == OP_AVERAGE:
            divide_by(buf, count, dtype, self.size)
        return err
