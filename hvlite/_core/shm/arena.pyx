"""Out-of-place results in memory the node's other ranks map too.

On one node the shm all-reduce writes each chunk of its result into every peer's outputs
(shm/cma.pyx). Into an ordinary array that is a kernel copy (process_vm_writev), and the
kernel's stores first read every line they fill: out of place, one more pass over memory than
in place (24 MiB on 2 ranks: 9.7 ms against 7.8). An output that lives in this arena, a memfd
every peer has mapped at init, is written by the peer itself with non-temporal stores instead.

The arena is one per process, 1 GiB of address space whose pages are only allocated when first
written; blocks are whole pages, reused by size (a training step asks for the same sizes every
time). A block carved from pages never used is populated when it is taken: the collective would
otherwise fault its pages in while it runs, ~4 us a page here (a 1 MiB output's first two
calls took 1.1-1.2 ms against 0.12 later), inside the calls auto times to choose an algorithm
(ring and rhd, tried first at 1 MiB out of place, lost their trials to that and were dropped).
`take` is called with the GIL (OutputPool); a block goes back when its last array does.
A forked child shares the arena's pages with its parent (it is MAP_SHARED): results it writes
into are seen by the parent.
"""
from libc.stdint cimport uint64_t
from cpython.buffer cimport PyBuffer_FillInfo
from posix.unistd cimport close, ftruncate
from posix.fcntl cimport open as c_open, O_RDWR
from posix.mman cimport mmap, munmap, PROT_READ, PROT_WRITE, MAP_SHARED, MAP_FAILED

cdef extern from "<sys/mman.h>" nogil:
    int memfd_create(const char* name, unsigned int flags)
    unsigned int MFD_CLOEXEC
    int MAP_NORESERVE
    int madvise(void* addr, size_t length, int advice)

cdef extern from *:
    """
    #ifndef MADV_POPULATE_WRITE
    #define MADV_POPULATE_WRITE 23
    #endif
    """
    int MADV_POPULATE_WRITE

cdef size_t CAP = 1 << 30
cdef size_t PAGE = 4096


cdef class Arena:
    cdef readonly int fd
    cdef char* base
    cdef readonly size_t cap
    cdef size_t top
    cdef dict free          # block size -> offsets of free blocks of that size

    def __cinit__(self):
        self.fd = -1
        self.base = NULL
        self.free = {}

    @property
    def address(self):
        return <uint64_t>self.base

    def take(self, size_t nbytes):
        """A Block of at least nbytes, or None when the arena is full."""
        cdef size_t size = (nbytes + PAGE - 1) // PAGE * PAGE, off
        if size == 0:
            size = PAGE
        spare = self.free.get(size)
        if spare:
            off = spare.pop()
        elif self.top + size <= self.cap:
            off = self.top
            self.top += size
            with nogil:     # ~4 us a page (once per block): other threads run meanwhile
                _populate(self.base + off, size)
        else:
            return None
        cdef Block b = Block.__new__(Block)
        b.arena, b.off, b.size, b.nbytes = self, off, size, nbytes
        return b

    def __dealloc__(self):
        if self.base != NULL:
            munmap(self.base, self.cap)
        if self.fd >= 0:
            close(self.fd)


cdef void _populate(char* p, size_t size) noexcept nogil:
    """The pages allocated and mapped writable now (Linux 5.14+), else touched one by one (a
    page of a memfd reads as zeros: writing a zero changes nothing but allocates it)."""
    cdef size_t i = 0
    cdef volatile char* q = p
    if madvise(p, size, MADV_POPULATE_WRITE) == 0:
        return
    while i < size:
        q[i] = 0
        i += PAGE


cdef class Block:
    """Pages of the arena, as a writable buffer; they go back to the arena with this object."""
    cdef Arena arena
    cdef size_t off, size, nbytes

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, self.arena.base + self.off, <Py_ssize_t>self.nbytes, 0,
                          flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def __dealloc__(self):
        if self.arena is not None:
            self.arena.free.setdefault(self.size, []).append(self.off)


_arena = [None]


def shared():
    """This process's arena, made on first use; None where the kernel has no memfd."""
    cdef Arena a
    cdef void* p
    if _arena[0] is not None:
        return _arena[0] or None
    a = Arena.__new__(Arena)
    a.fd = memfd_create(b"hvlite-outputs", MFD_CLOEXEC)
    if a.fd >= 0 and ftruncate(a.fd, CAP) == 0:
        p = mmap(NULL, CAP, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, a.fd, 0)
        if p != MAP_FAILED:
            a.base = <char*>p
            a.cap = CAP
    _arena[0] = a if a.base != NULL else False
    return _arena[0] or None


def map_peer(long pid, int fd, size_t cap):
    """A peer's arena mapped here (its address), or 0 when it cannot be (then its outputs are
    written through the kernel, as any array's)."""
    cdef bytes path = f"/proc/{pid}/fd/{fd}".encode()
    cdef int f = c_open(path, O_RDWR)
    cdef void* p
    if f < 0:
        return 0
    p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, f, 0)
    close(f)
    return 0 if p == MAP_FAILED else <uint64_t>p


def unmap_peer(uint64_t address, size_t cap):
    if address:
        munmap(<void*>address, cap)
