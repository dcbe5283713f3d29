"""The Cython core. Importing mpi4py.MPI first loads libmpi by its soname, so the extensions
resolve it even where their RUNPATH does not reach (the wrapper's RUNPATH is the main route)."""
