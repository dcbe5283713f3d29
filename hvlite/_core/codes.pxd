# Cython's view of codes.h: every code and name table, declared once (see codes.h).
cdef extern from "codes.h" nogil:
    enum:
        C_ALLREDUCE, C_ALLGATHER, C_BROADCAST, C_ALLTOALL, C_REDUCESCATTER, C_BARRIER, C_JOIN
        C_COUNT
        DT_FLOAT16, DT_BFLOAT16, DT_FLOAT32, DT_FLOAT64, DT_INT8, DT_UINT8, DT_INT16, DT_UINT16
        DT_INT32, DT_UINT32, DT_INT64, DT_UINT64, DT_F32_AS_F16, DT_F32_AS_BF16
        DT_COUNT
        OP_SUM, OP_AVERAGE, OP_MIN, OP_MAX, OP_PRODUCT, OP_ADASUM
        OP_COUNT
        ALG_AUTO, ALG_RING, ALG_RHD, ALG_TREE, ALG_HIERARCHICAL, ALG_MPI, ALG_RD, ALG_SHM
        ALG_COUNT
        WAY_SLOTS, WAY_DIRECT
        WAY_COUNT
        E_NONE, E_MISMATCH, E_SHUTDOWN, E_STALL, E_MPI, E_INVALID, E_LOST, E_DUPLICATE, E_FAILED
        E_COUNT
        HV_ERR_NOMEM, HV_ERR_SHM, HV_ERR_COUNT, HV_ERR_TIMEOUT, HV_ERR_LOST, HV_ERR_DESYNC,
        HV_ERR_SHM_TABLE, HV_MISMATCH
        ST_PENDING, ST_DONE, ST_ERROR
    const char* const HV_COLLECTIVE_NAMES[]
    const char* const HV_DTYPE_NAMES[]
    const size_t HV_DTYPE_SIZES[]
    const char* const HV_OP_NAMES[]
    const char* const HV_ALGORITHM_NAMES[]
    const char* const HV_SHM_WAY_NAMES[]
    const char* const HV_ERROR_KIND_NAMES[]
    const char* hv_name(const char* const* table, int count, int i, const char* fallback)
    const char* hv_own_error_text(int code)

# Writes the text of `code` (hvlite's own, else MPI's) into buf; returns its length.
cdef int error_text(int code, char* buf, int cap) noexcept nogil
# A rank-local allocation of `nbytes` failed: note the size (the round's failure message says
# it) and return HV_ERR_NOMEM. nomem_bytes(): the last size noted.
cdef int nomem(size_t nbytes) noexcept nogil
cdef size_t nomem_bytes() noexcept nogil
# CHKERR: raise MPIError for a non-zero code, naming `what`.
cdef int check(int err, what=*) except -1
