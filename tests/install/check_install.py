"""Run by `make test-install` with the interpreter of a venv that got hvlite from one command,
`pip install "<source>[mpich]"`, on a machine state with no MPI compiler in that venv before.
Checks what a user would: the core loads although its build environment (and the RUNPATH into
it) is gone, a 2-rank all-reduce is right, `hvliterun --check-build` finds the launcher, an sdist
builds without MPI or Cython and carries the sources, not their products, and with the MPI
removed the import says what to install."""
import glob
import os
import subprocess
import sys
import tarfile

VENV = os.path.dirname(os.path.dirname(sys.executable))
BIN = os.path.dirname(sys.executable)


def run(cmd, timeout=300, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def check(what, ok, detail=""):
    print(f"{'ok ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail and not ok else ""), flush=True)
    if not ok:
        sys.exit(1)


code = ("import hvlite, hvlite._core.codes as c, sys; print(hvlite.__file__); print(c.__file__); "
        "print('mpi4py.MPI' in sys.modules)")
pkg, ext, via_mpi4py = run([sys.executable, "-c", code], cwd="/").split("\n")[:3]
check("hvlite comes from the venv", pkg.startswith(VENV), pkg)
runpath = run(["readelf", "-d", ext])
dirs = [d for line in runpath.splitlines() if "RUNPATH" in line or "RPATH" in line
        for d in line.split("[", 1)[1].rstrip("]").split(":")]
gone = [d for d in dirs if "pip-build-env" in d]
check("the build's RUNPATH points into an environment that is gone",
      bool(gone) and not any(os.path.exists(d) for d in gone), runpath)
check("the core found the MPI the way mpi4py does", via_mpi4py == "True", via_mpi4py)

job = ("import numpy as np, hvlite as hvd; hvd.init(); "
       "got = hvd.allgather_object(hvd.allreduce(np.arange(4.0) * (hvd.rank() + 1), op=hvd.Sum).tolist()); "
       "hvd.rank() == 0 and print('result', got, flush=True)")      # one line, from rank 0
out = run([os.path.join(BIN, "mpiexec"), "-n", "2", sys.executable, "-c", job], timeout=120, cwd="/")
check("a 2-rank all-reduce is right, on every rank",
      "result [[0.0, 3.0, 6.0, 9.0], [0.0, 3.0, 6.0, 9.0]]" in out, out)
out = run([os.path.join(BIN, "hvliterun"), "--check-build"], timeout=120, cwd="/")
check("hvliterun --check-build finds the MPI and its launcher",
      "MPICH" in out and "none found" not in out and os.path.join(BIN, "mpiexec") in out, out)
out = run([sys.executable, "-m", "hvlite"], timeout=120, cwd="/")
check("python -m hvlite reports the build", "hvlite v" in out and "MPI library" in out, out)

src, dist = sys.argv[1], sys.argv[2]
run([sys.executable, "-m", "pip", "install", "-q", "build"])
run([sys.executable, "-m", "build", "--sdist", "--outdir", dist, src], timeout=600)
(sdist,) = glob.glob(os.path.join(dist, "*.tar.gz"))
names = tarfile.open(sdist).getnames()
check("the sdist carries the core's sources and the build backend",
      any(n.endswith("_core/coordinator.pyx") for n in names)
      and any(n.endswith("_core/codes.h") for n in names)
      and any(n.endswith("buildtools/backend.py") for n in names), names[:20])
check("and none of their products", not any(n.endswith((".so", ".c", ".cpp")) for n in names),
      [n for n in names if n.endswith((".so", ".c", ".cpp"))])

run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "mpich"])
out = subprocess.run([sys.executable, "-c", "import hvlite"], capture_output=True, text=True,
                     timeout=120, cwd="/")
if out.returncode == 0:
    print("note: with the mpich wheel removed, mpi4py still found an MPI on this machine")
else:
    check("with no MPI, the import says what to install", "pip install mpich" in out.stderr,
          out.stderr[-600:])
print("install checks passed")
