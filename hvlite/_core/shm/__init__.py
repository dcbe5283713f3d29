"""Shared memory within a node: the segment and its flag barriers (segment.pyx), the all-reduce
through peers' buffers by cross-memory attach (cma.pyx), broadcast and allgather through the
segment (copy.pyx), out-of-place results peers write into (arena.pyx)."""
