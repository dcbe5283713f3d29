"""Build the Cython core with the MPI compiler wrapper.

The compiler is `$MPICC` if set, else the `mpicc` next to the running Python (the `mpich` wheel puts
one into the venv), else `mpicc` on PATH. The wrapper already adds MPI's include path, library and a
RUNPATH to its lib directory, so the extensions find `libmpi` without relying on import order.
"""
import os
import shutil
import sys
import sysconfig

import mpi4py
import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup


def find_mpicc():
    cand = os.environ.get("MPICC")
    if cand:
        return cand
    here = os.path.join(os.path.dirname(sys.executable), "mpicc")
    if os.path.exists(here):
        return here
    found = shutil.which("mpicc")
    if not found:
        sys.exit("hvlite: no MPI compiler found; install the 'mpich' wheel or set MPICC=/path/to/mpicc")
    return found


mpicc = find_mpicc()
os.environ["CC"] = mpicc
# C++ modules link with the C++ wrapper next to mpicc (mpicxx), so libstdc++ comes along.
mpicxx = os.environ.get("MPICXX") or os.path.join(os.path.dirname(mpicc), "mpicxx")
os.environ["CXX"] = mpicxx if os.path.exists(mpicxx) else (shutil.which("mpicxx") or "c++")
# LDSHARED must start with the wrapper too, or the link step drops -lmpi and its RUNPATH.
ldshared = sysconfig.get_config_var("LDSHARED") or "cc -shared"
os.environ["LDSHARED"] = mpicc + " " + ldshared.split(None, 1)[1] if " " in ldshared else mpicc + " -shared"

# Every .pyx under hvlite/_core is one extension, named by its path (hvlite/_core/shm/cma.pyx is
# hvlite._core.shm.cma); one that says `# distutils: language = c++` is C++ (std containers).
CORE = os.path.join("hvlite", "_core")
MODULES = sorted(os.path.relpath(os.path.join(d, f), CORE)[:-4].replace(os.sep, ".")
                 for d, _, files in os.walk(CORE) for f in files if f.endswith(".pyx"))


def language(module):
    with open(os.path.join(CORE, *module.split(".")) + ".pyx") as f:
        return "c++" if "# distutils: language = c++" in f.read() else "c"


# HVLITE_SANITIZE=1 (make test-asan): AddressSanitizer and UBSan in every extension, frame
# pointers kept for readable reports; Python itself is not instrumented (libasan is preloaded).
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"] \
    if os.environ.get("HVLITE_SANITIZE") == "1" else []
ext = [
    Extension(
        f"hvlite._core.{m}",
        [os.path.join(CORE, *m.split(".")) + ".pyx"],
        include_dirs=[mpi4py.get_include(), numpy.get_include(), "hvlite/_core"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O1" if SANITIZE else "-O3", "-fwrapv", "-fno-strict-aliasing",
                            "-Wno-unused-function"] + SANITIZE,
        extra_link_args=SANITIZE,
        language=language(m),
        libraries=["rt"] if m == "shm.segment" else [],     # shm_open lives in librt before glibc 2.34
    )
    for m in MODULES
]

setup(
    ext_modules=cythonize(
        ext,
        language_level=3,
        nthreads=int(os.environ.get("HVLITE_BUILD_JOBS", "0")) or None,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True,
                             "initializedcheck": False, "embedsignature": True},
    ),
)
