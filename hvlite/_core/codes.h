/* Every code hvlite's modules and ranks exchange, declared once, each with its name table.
 *
 * Each list below is an X-macro: the enum and its name table are both generated from it, so a
 * code cannot exist without its name and a table is sized by its count (as NCCL does). Codes
 * that travel between ranks (collectives, dtypes, ops, algorithms) are never renumbered.
 * codes.pxd declares them to Cython; codes.pyx is the one place that turns a code into text and
 * an error kind into an exception class.
 */
#ifndef HVLITE_CODES_H
#define HVLITE_CODES_H
#include <stddef.h>

#define HV_COLLECTIVES(X) \
    X(C_ALLREDUCE, "allreduce") X(C_ALLGATHER, "allgather") X(C_BROADCAST, "broadcast") \
    X(C_ALLTOALL, "alltoall") X(C_REDUCESCATTER, "reducescatter") X(C_BARRIER, "barrier") \
    X(C_JOIN, "join")

/* The last two are float32 buffers reduced as 16-bit floats (fp16/bf16 compression on one
 * node): every operand and every result rounded to the 16-bit type, the same bits as casting,
 * reducing the casts and casting back, without the casts' passes over memory. */
#define HV_DTYPES(X) \
    X(DT_FLOAT16, "float16", 2) X(DT_BFLOAT16, "bfloat16", 2) X(DT_FLOAT32, "float32", 4) \
    X(DT_FLOAT64, "float64", 8) X(DT_INT8, "int8", 1) X(DT_UINT8, "uint8", 1) \
    X(DT_INT16, "int16", 2) X(DT_UINT16, "uint16", 2) X(DT_INT32, "int32", 4) \
    X(DT_UINT32, "uint32", 4) X(DT_INT64, "int64", 8) X(DT_UINT64, "uint64", 8) \
    X(DT_F32_AS_F16, "float32 as float16", 4) X(DT_F32_AS_BF16, "float32 as bfloat16", 4)

/* In Horovod's order, so an op's value is Horovod's (Average 0, Sum 1, Adasum 2, Min 3, Max 4,
 * Product 5: `op=1`, or `op or hvd.Average`, means what it means there). Average never reaches
 * a kernel: it is a Sum followed by a division. Adasum has its own algorithm
 * (algorithms/adasum.pyx). */
#define HV_OPS(X) \
    X(OP_AVERAGE, "Average") X(OP_SUM, "Sum") X(OP_ADASUM, "Adasum") X(OP_MIN, "Min") \
    X(OP_MAX, "Max") X(OP_PRODUCT, "Product")

#define HV_ALGORITHMS(X) \
    X(ALG_AUTO, "auto") X(ALG_RING, "ring") X(ALG_RHD, "rhd") X(ALG_TREE, "tree") \
    X(ALG_HIERARCHICAL, "hierarchical") X(ALG_MPI, "mpi") X(ALG_RD, "rd") X(ALG_SHM, "shm")

/* The two ways the shared segment all-reduces on one node (shm/segment.pyx through the slots,
 * shm/cma.pyx straight from the peers' buffers): which is faster depends on the machine and on
 * the buffers' pages, so each size class measures both on the job's calls (execute/dispatch.pyx). */
#define HV_SHM_WAYS(X) X(WAY_SLOTS, "slots") X(WAY_DIRECT, "direct")

/* How a request ended; codes.pyx maps each kind to its exception class. */
#define HV_ERROR_KINDS(X) \
    X(E_NONE, "none") X(E_MISMATCH, "mismatch") X(E_SHUTDOWN, "shutdown") X(E_STALL, "stall") \
    X(E_MPI, "mpi") X(E_INVALID, "invalid") X(E_LOST, "lost") X(E_DUPLICATE, "duplicate") X(E_FAILED, "failed")

/* hvlite's own error codes: negative, so they never collide with MPI's (0 is success, MPI's
 * codes and classes are positive). The text is what users read after "MPI error <code>:". */
#define HV_OWN_ERRORS(X) \
    X(HV_ERR_NOMEM, -1, "out of memory allocating a request, result or scratch space") \
    X(HV_ERR_SHM, -2, "the shared-memory all-reduce is unavailable here (see hvlite.shm_info())") \
    X(HV_ERR_COUNT, -3, "a count out of range: negative, over INT_MAX elements or bytes in one message (MPI counts are int), or a total past 64 bits") \
    X(HV_ERR_TIMEOUT, -7, "no answer from the peer within the time limit") \
    X(HV_ERR_LOST, -8, "a peer rank stopped answering while this one waited on it (lost)") \
    X(HV_ERR_DESYNC, -9, "the node's ranks fell out of step in their shared segment (an internal error)") \
    X(HV_ERR_SHM_TABLE, -10, "a rank's table in the shared segment does not lay out the batch as the others' do (damaged shared memory): nothing was read or written") \
    X(HV_MISMATCH, -100, "the ranks disagree on the call (count, dtype, op or algorithm)")

#define HV_ENUM2(name, text) name,
#define HV_ENUM3(name, text, size) name,
#define HV_TEXT2(name, text) text,
#define HV_TEXT3(name, text, size) text,
#define HV_SIZE3(name, text, size) size,
#define HV_OWN_ENUM(name, value, text) name = value,

enum { HV_COLLECTIVES(HV_ENUM2) C_COUNT };
enum { HV_DTYPES(HV_ENUM3) DT_COUNT };
enum { HV_OPS(HV_ENUM2) OP_COUNT };
enum { HV_ALGORITHMS(HV_ENUM2) ALG_COUNT };
enum { HV_SHM_WAYS(HV_ENUM2) WAY_COUNT };
enum { HV_ERROR_KINDS(HV_ENUM2) E_COUNT };
enum { HV_OWN_ERRORS(HV_OWN_ENUM) HV_OWN_ERRORS_END = 0 };
enum { ST_PENDING = 0, ST_DONE = 1, ST_ERROR = 2 };   /* a request's status */

static const char* const HV_COLLECTIVE_NAMES[C_COUNT] = { HV_COLLECTIVES(HV_TEXT2) };
static const char* const HV_DTYPE_NAMES[DT_COUNT] = { HV_DTYPES(HV_TEXT3) };
static const size_t HV_DTYPE_SIZES[DT_COUNT] = { HV_DTYPES(HV_SIZE3) };
static const char* const HV_OP_NAMES[OP_COUNT] = { HV_OPS(HV_TEXT2) };
static const char* const HV_ALGORITHM_NAMES[ALG_COUNT] = { HV_ALGORITHMS(HV_TEXT2) };
static const char* const HV_SHM_WAY_NAMES[WAY_COUNT] = { HV_SHM_WAYS(HV_TEXT2) };
static const char* const HV_ERROR_KIND_NAMES[E_COUNT] = { HV_ERROR_KINDS(HV_TEXT2) };

/* table[i], or `fallback` for a code outside it (a code from a peer is never trusted). */
static inline const char* hv_name(const char* const* table, int count, int i, const char* fallback) {
    return (i >= 0 && i < count) ? table[i] : fallback;
}

/* The text of one of hvlite's own codes, or NULL for any other code (MPI's). */
static inline const char* hv_own_error_text(int code) {
#define HV_OWN_CASE(name, value, text) if (code == value) return text;
    HV_OWN_ERRORS(HV_OWN_CASE)
#undef HV_OWN_CASE
    return NULL;
}

#endif
