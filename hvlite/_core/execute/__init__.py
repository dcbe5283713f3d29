"""Running what was agreed: dispatch (the one way to run an all-reduce), fusion of ready
all-reduces into batches, and the collectives that are MPI's own."""
