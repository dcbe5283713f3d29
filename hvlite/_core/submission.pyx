"""Submission: the options of one collective as a rank submits it (codes from codes.h), so
Coordinator.submit takes a name, this and the buffers instead of a dozen positional values."""
# distutils: language = c++
cimport cython
cimport numpy as cnp
from libc.stdint cimport int64_t
from libcpp.vector cimport vector
from hvlite._core.request cimport *

cnp.import_array()


@cython.freelist(16)
cdef class Submission:
    def __init__(self, int collective, int dtype=0, int op=0, int root=0, int algorithm=0,
                 shape=None, splits=None, error=None, bint inline=False, bint reused=False):
        self.collective = collective
        self.dtype = dtype
        self.op = op
        self.root = root
        self.algorithm = algorithm
        self.shape = None if shape is None else tuple(shape)
        self.splits = splits
        self.error = None if error is None else str(error)
        self.inline = inline
        self.reused = reused

    def __repr__(self):
        return (f"Submission(collective={self.collective}, dtype={self.dtype}, op={self.op}, "
                f"root={self.root}, algorithm={self.algorithm}, shape={self.shape}, "
                f"splits={self.splits}, error={self.error!r}, inline={self.inline}, "
                f"reused={self.reused})")


cdef Request* new_request(Submission s, const string& name, cnp.ndarray inp, cnp.ndarray out) except NULL:
    cdef Request* req = new Request()
    fill_request(req, s, name.data(), name.size(), inp, out, True)
    return req


cdef int fill_request(Request* req, Submission s, const char* name, size_t n, cnp.ndarray inp,
                      cnp.ndarray out, bint stamp) except -1:
    """Every field set afresh, so a request that completed can be filled again: its strings and
    vectors keep their room, and a steady loop of calls allocates nothing (Coordinator.run_now).
    `stamp`: submitted now (else the caller stamps it, when a round will wait on it)."""
    cdef int k
    req.meta.shape.clear()
    if s.shape is not None:
        for d in s.shape:
            req.meta.shape.push_back(d)
    elif inp is not None:       # the input's own shape, read from its C fields
        for k in range(cnp.PyArray_NDIM(inp)):
            req.meta.shape.push_back(cnp.PyArray_DIMS(inp)[k])
    req.splits.clear()
    if s.splits is not None:
        for v in s.splits:
            req.splits.push_back(v)
    req.held = NULL
    req.name.assign(name, n)
    req.meta.collective = s.collective
    req.meta.dtype = s.dtype
    req.meta.op = s.op
    req.meta.root = s.root
    req.meta.algorithm = s.algorithm
    if s.error:
        req.meta.error = s.error.encode()
    else:
        req.meta.error.clear()
    req.input = <char*>cnp.PyArray_DATA(inp) if inp is not None else NULL
    req.output = <char*>cnp.PyArray_DATA(out) if out is not None else NULL
    req.output_bytes = <size_t>cnp.PyArray_NBYTES(out) if out is not None else 0
    req.result = NULL
    req.result_given = False
    req.result_rows = 0
    req.result_splits.clear()
    req.meta.apart = req.output != NULL and req.output != req.input
    req.status = ST_PENDING
    req.error_kind = 0
    req.error_code = 0
    req.error.clear()
    req.value = 0
    req.algorithm_used = 0
    req.orphan = False
    req.settled_here = False
    req.slot = -1
    req.sent = False
    req.submitted = hv_now() if stamp else 0
    return 0
