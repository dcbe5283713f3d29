"""The installed extensions load on their own: libmpi is found through the link-time RUNPATH,
not only because mpi4py.MPI happened to load it first."""
import subprocess
import sys


def test_core_extension_imports_without_mpi4py_first():
    code = ("import sys, hvlite._core.algorithms.p2p as p; "
            "assert 'mpi4py.MPI' not in sys.modules, 'mpi4py.MPI was imported'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_single_process_job_without_mpiexec():
    code = ("import numpy as np, hvlite as hvd; hvd.init(); "
            "print(hvd.size(), hvd.allreduce(np.arange(3.0), op=hvd.Sum).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "[0.0,", "1.0,", "2.0]"]


def test_every_subpackage_is_in_the_distribution():
    """A package missing from pyproject's list would be absent from a non-editable install."""
    import os
    import pytest
    tomllib = pytest.importorskip("tomllib")     # Python 3.11+
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = {os.path.relpath(d, root).replace(os.sep, ".")
             for d, _, files in os.walk(os.path.join(root, "hvlite")) if "__init__.py" in files}
    assert found <= listed, f"not in pyproject.toml's packages: {sorted(found - listed)}"


def _make_dry_run(*args):
    """The commands `make` would run from scratch (-n -B), for a venv that does not exist."""
    import os
    import shutil
    import pytest
    if shutil.which("make") is None:
        pytest.skip("no make")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(["make", "-n", "-B", *args, "VENV=build/dry-run-venv"], cwd=root,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_demo_installs_no_torch_and_make_test_a_pinned_one():
    assert "torch" not in _make_dry_run("demo")
    test = _make_dry_run("test")
    assert '"torch==' in test and "--index-url" not in test
    assert "--index-url https://example.invalid/cpu" in _make_dry_run(
        "test", "TORCH_INDEX=https://example.invalid/cpu")
