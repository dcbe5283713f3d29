"""Build the Cython core with the MPI compiler wrapper.

Nothing here needs an MPI, Cython or NumPy until the extensions are built, so an sdist builds
anywhere. At build time the compiler is `$MPICC` if set, else the `mpicc` next to the running
Python (the `mpich` wheel puts one into a venv), else `mpicc` on PATH (pip's isolated build puts
the `mpich` wheel's there when no other was found: buildtools/backend.py). The wrapper adds MPI's
include path, library and a RUNPATH; where that RUNPATH is gone (a wheel installed elsewhere),
hvlite/_core finds the MPI at import the way mpi4py does.
"""
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CORE = os.path.join("hvlite", "_core")
# Every .pyx under hvlite/_core is one extension, named by its path (hvlite/_core/shm/cma.pyx is
# hvlite._core.shm.cma); one that says `# distutils: language = c++` is C++ (std containers).
MODULES = sorted(os.path.relpath(os.path.join(d, f), CORE)[:-4].replace(os.sep, ".")
                 for d, _, files in os.walk(CORE) for f in files if f.endswith(".pyx"))
# HVLITE_SANITIZE=1 (make test-asan): AddressSanitizer and UBSan in every extension, frame
# pointers kept for readable reports; Python itself is not instrumented (libasan is preloaded).
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=undefined"] if os.environ.get("HVLITE_SANITIZE") == "1" else []
DIRECTIVES = {"boundscheck": False, "wraparound": False, "cdivision": True,
              "initializedcheck": False, "embedsignature": True}


def source(module):
    return os.path.join(CORE, *module.split(".")) + ".pyx"


def language(module):
    with open(source(module)) as f:
        return "c++" if "# distutils: language = c++" in f.read() else "c"


def find_mpicc():
    cand = os.environ.get("MPICC")
    if cand:
        return cand
    here = os.path.join(os.path.dirname(sys.executable), "mpicc")
    if os.path.exists(here):
        return here
    found = shutil.which("mpicc")
    if not found:
        sys.exit("hvlite: no MPI compiler found. `pip install mpich` (or impi-rt) first and build "
                 "again, set MPICC=/path/to/mpicc for a cluster's MPI, or let pip build in "
                 "isolation (without --no-build-isolation): it then brings the mpich wheel")
    return found


def wrapper_lib_dirs(mpicc):
    """The -L directories the MPI wrapper links with (MPICH/Intel `-show`, Open MPI `--showme`).

    Python's own library directory (/usr/lib/<triplet> for a distribution's Python) reaches the
    link line before the wrapper's -L, through LDSHARED or setuptools. Where a system MPI's
    libmpi.so sits there, -lmpi would bind the core to that library, of another ABI than the
    wrapper's headers: so the wrapper's directories go first. Nothing found: nothing added."""
    try:
        cmd = shlex.split(mpicc)            # MPICC may carry arguments ("mpicc -cc=clang")
    except ValueError:
        return []
    for flag in ("-show", "--showme"):
        try:
            out = subprocess.run(cmd + [flag], capture_output=True, text=True, errors="replace",
                                 stdin=subprocess.DEVNULL, timeout=60)
            words = shlex.split(out.stdout) if out.returncode == 0 else []
        except (OSError, subprocess.SubprocessError, ValueError):
            continue
        if words:
            return [w[2:] for w in words if w.startswith("-L") and len(w) > 2]
    return []


class BuildMPI(build_ext):
    """build_ext through the MPI compiler wrapper, cythonizing first."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = int(os.environ.get("HVLITE_BUILD_JOBS", "0")) or os.cpu_count() or 1

    def run(self):
        try:
            import mpi4py
            import numpy
            from Cython.Build import cythonize
        except ImportError as e:
            sys.exit(f"hvlite: building the core needs Cython, NumPy and mpi4py ({e}); "
                     "`pip install cython numpy mpi4py`, or build without --no-build-isolation")
        mpicc = find_mpicc()
        os.environ["CC"] = mpicc
        # C++ modules link with the C++ wrapper next to mpicc (mpicxx), so libstdc++ comes along.
        mpicxx = os.environ.get("MPICXX") or os.path.join(os.path.dirname(mpicc), "mpicxx")
        os.environ["CXX"] = mpicxx if os.path.exists(mpicxx) else (shutil.which("mpicxx") or "c++")
        # LDSHARED must start with the wrapper too, or the link step drops -lmpi and its RUNPATH.
        # The wrapper's own -L comes first, before any of Python's (wrapper_lib_dirs), for C
        # (LDSHARED) and C++ extensions (LDCXXSHARED: setuptools 72.2 and later link those
        # with it, the C++ wrapper put in its first place).
        first = " ".join(shlex.quote("-L" + d) for d in wrapper_lib_dirs(mpicc))
        for var, driver, default in (("LDSHARED", mpicc, "cc -shared"),
                                     ("LDCXXSHARED", os.environ["CXX"], "c++ -shared")):
            line = sysconfig.get_config_var(var) or default
            os.environ[var] = " ".join(filter(None, [
                driver, first, line.split(None, 1)[1] if " " in line else "-shared"]))
        for ext in self.extensions:
            ext.include_dirs += [mpi4py.get_include(), numpy.get_include(), CORE]
        done = {e.name: e for e in cythonize(self.extensions, language_level=3,
                                             nthreads=self.parallel if self.parallel > 1 else None,
                                             compiler_directives=DIRECTIVES)}
        for ext in self.extensions:     # setuptools' own objects, with the generated C/C++
            ext.sources = done[ext.name].sources
        super().run()


setup(
    ext_modules=[
        Extension(
            f"hvlite._core.{m}", [source(m)],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=["-O1" if SANITIZE else "-O3", "-fwrapv", "-fno-strict-aliasing",
                                "-Wno-unused-function"] + SANITIZE,
            extra_link_args=SANITIZE,
            language=language(m),
            libraries=["rt"] if m == "shm.segment" else [],   # shm_open: librt before glibc 2.34
        )
        for m in MODULES
    ],
    cmdclass={"build_ext": BuildMPI},
)
