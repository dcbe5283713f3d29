"""scripts/gpu_check.sh: syntax and argument handling (the run itself needs a GPU)."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_check.sh")


def _run(*args, parse_only=True):
    env = dict(os.environ, GPU_CHECK_PARSE_ONLY="1" if parse_only else "0")
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, env=env,
                          timeout=30)


def test_syntax_and_help():
    assert subprocess.run(["bash", "-n", SCRIPT]).returncode == 0
    r = _run("--help")
    assert r.returncode == 0 and "--wheels DIR" in r.stdout


def test_arguments(tmp_path):
    r = _run("--wheels", str(tmp_path), "--sizes", "1 2", "--skip-bench")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"wheels={tmp_path} venv=.venv-gpu sizes=1 2 bench=0 system=0"
    assert _run("--wheels", str(tmp_path / "absent")).returncode == 2
    assert "not a directory" in _run("--wheels", str(tmp_path / "absent")).stderr
    r = _run("--system", "--skip-bench")
    assert r.returncode == 0 and r.stdout.strip().endswith("bench=0 system=1"), r.stderr
    assert _run("--bogus").returncode == 2
    assert _run("--wheels").returncode == 2
