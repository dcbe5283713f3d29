"""hvlite's build backend: setuptools', plus an MPI to build with when the machine has none.

An isolated build (`pip install .`, `python -m build`) starts from a bare environment; asking
for the `mpich` wheel there, when neither $MPICC nor an `mpicc` on PATH is present, gives the
build the compiler wrapper it needs, so one pip command installs hvlite on a bare machine. With
$MPICC set (a cluster's MPI) nothing is added. Everything else is setuptools' own."""
import os
import shutil

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403 - the rest of the backend interface


def _mpi():
    return [] if os.environ.get("MPICC") or shutil.which("mpicc") else ["mpich"]


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) + _mpi()


def get_requires_for_build_editable(config_settings=None):
    return _setuptools.get_requires_for_build_editable(config_settings) + _mpi()


def _check_setuptools():
    """Without build isolation the environment's setuptools builds: say plainly when it is too
    old for pyproject.toml's license field, instead of its validation error."""
    import setuptools
    major = int(setuptools.__version__.split(".")[0])
    if major < 77:
        raise SystemExit(f"hvlite's build needs setuptools 77 or newer (this environment has "
                         f"{setuptools.__version__}): `pip install 'setuptools>=77'`, or build "
                         "without --no-build-isolation")


_check_setuptools()
