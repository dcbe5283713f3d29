"""All-reduce algorithms over MPI point-to-point, one per module, each behind the one interface
in algorithm.pxd; p2p.pyx holds the blocks they share (chunk arithmetic, chunked sendrecv)."""
