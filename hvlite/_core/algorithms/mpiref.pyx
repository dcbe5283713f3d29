"""MPI_Allreduce pass-through: the reference every hvlite algorithm is measured against.

Standard types map to MPI's predefined datatypes and ops. float16 and bfloat16 have no portable
MPI type, so they travel as 2-byte contiguous types with user-defined ops that call hvlite's own
kernels. Min and Max on float32/float64 use user-defined ops too: MPI_MIN/MPI_MAX leave NaN and
the sign of zero to the library's reduction order, and ranks then disagree; hvlite's kernels give
the same bits in any order, as every other algorithm does. Sums and products can still end in
a NaN whose sign depends on the order the library added in (inf + -inf, a NaN met first or
second), so NaNs of float32/float64 results come out as the one quiet NaN everywhere. Counts
above INT_MAX go in pieces.
"""
from libc.stdint cimport uint16_t, uint32_t, uint64_t
from mpi4py.libmpi cimport *
from hvlite._core.dtypes cimport *
from hvlite._core.codes cimport *
from hvlite._core.kernels.reduce cimport *
from hvlite._core.liveness cimport wait_all

cdef enum:
    PIECE_ELEMS = 1 << 30

cdef bint _ready = False
cdef MPI_Datatype _half_types[4]      # float16, bfloat16, float32 as float16, as bfloat16
cdef MPI_Op _user_ops[4]              # Sum, Min, Max, Product (see _opslot); they call reduce_into


cdef inline int _opslot(int op) noexcept nogil:
    if op == OP_SUM:
        return 0
    if op == OP_MIN:
        return 1
    if op == OP_MAX:
        return 2
    return 3


cdef inline int _dtype_of(MPI_Datatype dt) noexcept nogil:
    if dt == MPI_FLOAT:
        return DT_FLOAT32
    if dt == MPI_DOUBLE:
        return DT_FLOAT64
    if dt == _half_types[0]:
        return DT_FLOAT16
    if dt == _half_types[1]:
        return DT_BFLOAT16
    return DT_F32_AS_F16 if dt == _half_types[2] else DT_F32_AS_BF16


cdef inline void _apply(void* invec, void* inout, int* n, MPI_Datatype* dt, int op) noexcept nogil:
    reduce_into(inout, invec, <size_t>n[0], _dtype_of(dt[0]), op)

cdef void _sum(void* a, void* b, int* n, MPI_Datatype* dt) noexcept nogil:
    _apply(a, b, n, dt, OP_SUM)
cdef void _min(void* a, void* b, int* n, MPI_Datatype* dt) noexcept nogil:
    _apply(a, b, n, dt, OP_MIN)
cdef void _max(void* a, void* b, int* n, MPI_Datatype* dt) noexcept nogil:
    _apply(a, b, n, dt, OP_MAX)
cdef void _prod(void* a, void* b, int* n, MPI_Datatype* dt) noexcept nogil:
    _apply(a, b, n, dt, OP_PRODUCT)


cdef int _setup() noexcept nogil:
    global _ready
    cdef int i, err = 0
    for i in range(4):
        err = err or MPI_Type_contiguous(2 if i < 2 else 4, MPI_BYTE, &_half_types[i])
        err = err or MPI_Type_commit(&_half_types[i])
    err = err or MPI_Op_create(_sum, 1, &_user_ops[0])
    err = err or MPI_Op_create(_min, 1, &_user_ops[1])
    err = err or MPI_Op_create(_max, 1, &_user_ops[2])
    err = err or MPI_Op_create(_prod, 1, &_user_ops[3])
    if not err:
        _ready = True
    return err


cdef int ensure_half_ops() noexcept nogil:
    """Create the float16/bfloat16 types and the user-defined ops once (only the coordinator
    thread calls MPI)."""
    if _ready:
        return 0
    return _setup()


cdef MPI_Datatype mpi_type(int dt) noexcept nogil:
    if dt == DT_FLOAT32: return MPI_FLOAT
    if dt == DT_FLOAT64: return MPI_DOUBLE
    if dt == DT_INT8: return MPI_INT8_T
    if dt == DT_UINT8: return MPI_UINT8_T
    if dt == DT_INT16: return MPI_INT16_T
    if dt == DT_UINT16: return MPI_UINT16_T
    if dt == DT_INT32: return MPI_INT32_T
    if dt == DT_UINT32: return MPI_UINT32_T
    if dt == DT_INT64: return MPI_INT64_T
    if dt == DT_UINT64: return MPI_UINT64_T
    if dt == DT_FLOAT16: return _half_types[0]
    if dt == DT_BFLOAT16: return _half_types[1]
    if dt == DT_F32_AS_F16: return _half_types[2]
    return _half_types[3]


cdef MPI_Op mpi_op(int dt, int op) noexcept nogil:
    if dt == DT_FLOAT16 or dt == DT_BFLOAT16 or dt == DT_F32_AS_F16 or dt == DT_F32_AS_BF16:
        return _user_ops[_opslot(op)]
    if (dt == DT_FLOAT32 or dt == DT_FLOAT64) and (op == OP_MIN or op == OP_MAX):
        return _user_ops[_opslot(op)]
    if op == OP_SUM: return MPI_SUM
    if op == OP_MIN: return MPI_MIN
    if op == OP_MAX: return MPI_MAX
    return MPI_PROD


cdef void _canonical_nans(char* buf, size_t count, int dtype) noexcept nogil:
    """Every NaN as the positive quiet NaN: the same bits on every rank, whatever order MPI
    reduced in (one pass over the result, vectorized)."""
    cdef size_t i
    cdef uint32_t* f
    cdef uint64_t* d
    if dtype == DT_FLOAT32:
        f = <uint32_t*>buf
        for i in range(count):
            if (f[i] & 0x7fffffffU) > 0x7f800000U:
                f[i] = 0x7fc00000U
    elif dtype == DT_FLOAT64:
        d = <uint64_t*>buf
        for i in range(count):
            if (d[i] & 0x7fffffffffffffffULL) > 0x7ff0000000000000ULL:
                d[i] = 0x7ff8000000000000ULL


cdef int mpi_allreduce(char* buf, size_t count, int dtype, int op, MPI_Comm comm) noexcept nogil:
    cdef int err
    cdef MPI_Request req
    cdef size_t off = 0, n, es = dtype_size(dtype)
    err = ensure_half_ops()
    if err:
        return err
    while off < count:
        n = count - off if count - off < PIECE_ELEMS else PIECE_ELEMS
        err = MPI_Iallreduce(MPI_IN_PLACE, buf + off * es, <int>n, mpi_type(dtype), mpi_op(dtype, op), comm,
                             &req)
        if not err:
            err = wait_all(1, &req, False)
        if err:
            return err
        off += n
    if op == OP_SUM or op == OP_PRODUCT:
        _canonical_nans(buf, count, dtype)
    return 0
