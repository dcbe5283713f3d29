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


DECOY_BUILD = r"""
import runpy, sys
import setuptools
decoy, out, tmp = sys.argv[1:4]
MODULES = ("hvlite._core.codes", "hvlite._core.negotiation.exchange")     # C, and C++
real = setuptools.setup
def some_modules(**kw):
    kw["ext_modules"] = [e for e in kw["ext_modules"] if e.name in MODULES]
    return real(**kw)
setuptools.setup = some_modules
# -L: where setuptools puts a shared Python's LIBDIR (/usr/lib/<triplet> on a distribution)
sys.argv = ["setup.py", "build_ext", "-L", decoy, "--build-lib", out, "--build-temp", tmp]
runpy.run_path("setup.py", run_name="__main__")
"""


def test_the_core_links_the_wrappers_mpi_over_one_in_pythons_library_directory(tmp_path):
    """A system MPI's libmpi.so of another ABI in Python's own library directory (Ubuntu's
    python3 with Open MPI installed) must not take -lmpi from the MPI wrapper, in C modules
    or C++ ones: a core linked to it calls an MPI that mpi4py never initialised."""
    import glob
    import os
    import shutil
    import pytest
    cc, objdump = shutil.which("cc"), shutil.which("objdump")
    if cc is None or objdump is None:
        pytest.skip("needs cc and objdump")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    # the decoy defines what the modules call, so that a linker that reaches it first binds to it
    calls = set()
    for module in ("codes", os.path.join("negotiation", "exchange")):
        core = glob.glob(os.path.join(root, "hvlite", "_core", module + "*.so"))
        assert core, f"the core's {module} is not built"
        syms = subprocess.run([shutil.which("nm") or "nm", "-D", "--undefined-only", core[0]],
                              capture_output=True, text=True, timeout=60).stdout.split()
        calls |= {s.split("@")[0] for s in syms if s.startswith(("MPI_", "PMPI_", "ompi_"))}
    assert calls, "the core calls no MPI function?"
    (decoy / "mpi.c").write_text("".join(f"void {c}(void) {{}}\n" for c in sorted(calls)))
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libmpi.so.99", "-o",
                    str(decoy / "libmpi.so"), str(decoy / "mpi.c")], check=True, timeout=60)
    out = subprocess.run([sys.executable, "-c", DECOY_BUILD, str(decoy), str(tmp_path / "lib"),
                          str(tmp_path / "tmp")], cwd=root, capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, HVLITE_BUILD_JOBS="1"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    for module in ("codes", os.path.join("negotiation", "exchange")):
        built = glob.glob(str(tmp_path / "lib" / "hvlite" / "_core" / module) + "*.so")
        assert len(built) == 1, out.stdout[-2000:]
        dyn = subprocess.run([objdump, "-p", built[0]], capture_output=True, text=True,
                             timeout=60).stdout
        needed = [line.split()[1] for line in dyn.splitlines()
                  if line.strip().startswith("NEEDED")]
        assert "libmpi.so.99" not in needed, (module, needed)
        assert any(n.startswith("libmpi") for n in needed), (module, needed)


def test_a_core_linked_to_another_mpi_than_mpi4pys_is_named_at_init(mpirun):
    """The core's own binding finds MPI not started after mpi4py started its MPI: two libraries
    in one process. init() names both, on every rank, instead of letting the core call the idle
    one (which aborts the process with that MPI's 'called before MPI_INIT')."""
    out = mpirun(2, "tests/two_mpis_job.py", pytest_module=False, timeout=120)
    for r in range(2):
        line = next((x for x in out.splitlines() if f"rank {r} refused:" in x), None)
        assert line is not None, out
        assert "MPILibraryError True: hvlite's core is linked to another MPI library " \
               "(Open MPI v4.1.6) than the one mpi4py loaded and started (MPI" in line \
               or "(Intel" in line, line
    assert "went ahead" not in out
