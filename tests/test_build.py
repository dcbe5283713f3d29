"""The installed extensions load on their own: libmpi is found through the link-time RUNPATH,
not only because mpi4py.MPI happened to load it first."""
import subprocess
import sys


def test_core_extension_imports_without_mpi4py_first():
    code = ("import sys, hvlite._core.p2p as p; "
            "assert 'mpi4py.MPI' not in sys.modules, 'mpi4py.MPI was imported'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_single_process_job_without_mpiexec():
    code = ("import numpy as np, hvlite as hvd; hvd.init(); "
            "print(hvd.size(), hvd.allreduce(np.arange(3.0), op=hvd.Sum).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "[0.0,", "1.0,", "2.0]"]
