"""`hvlite.run.run(func, ...)`: Horovod's `horovod.run` -- run a Python function on N ranks from a
plain Python process (a notebook, a driver script) and get every rank's return value.

The function and its arguments are pickled into a private directory (mode 0700; with
cloudpickle when it is installed, so functions defined in `__main__` or a notebook travel by
value; otherwise they must be importable by the ranks). hvliterun starts the ranks, each runs
`hvlite.run.func` on that directory and writes its result there, and the caller reads them back
in rank order. Only files this call's own ranks wrote in its own directory are unpickled."""
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

from hvlite.collectives import dump_object

PAYLOAD = "payload.pkl"


class RunError(RuntimeError):
    """The job failed; the message carries the end of its output."""


def run(func, args=(), kwargs=None, np=1, hosts=None, hostfile=None, env=None, verbose=False,
        mpi_args=None, timeout=None, executable=None):
    """Run `func(*args, **kwargs)` on `np` ranks under hvliterun; returns the list of the
    ranks' return values, rank 0's first. `hosts` ("h1:2,h2:2") / `hostfile` as for hvliterun;
    `env`: variables added to this process's environment for the job; `mpi_args`: more
    hvliterun options (e.g. ["--fusion-threshold-mb", "32"]); `timeout`: seconds before the
    job is killed (RunError). `func` calls hvlite.init() itself, as under horovod.run. Raises
    RunError, with the end of the job's output, when any rank fails."""
    if not callable(func):
        raise TypeError(f"hvlite.run.run: func must be callable, got {type(func).__name__}")
    if int(np) < 1:
        raise ValueError(f"hvlite.run.run: np must be at least 1, got {np}")
    work = tempfile.mkdtemp(prefix="hvlite-run-")     # 0700: no other user reads or plants files
    try:
        with open(os.path.join(work, PAYLOAD), "wb") as f:
            f.write(dump_object((func, tuple(args), dict(kwargs or {}))))
        python = executable or sys.executable
        cmd = [python, "-m", "hvlite.run", "-np", str(int(np))]
        if hosts:
            cmd += ["-H", hosts]
        if hostfile:
            cmd += ["--hostfile", hostfile]
        if verbose:
            cmd.append("--verbose")
        cmd += list(mpi_args or []) + [python, "-m", "hvlite.run.func", work]
        job_env = dict(os.environ, **{k: str(v) for k, v in (env or {}).items()})
        path = [p for p in sys.path if p and os.path.isdir(p)]
        job_env["PYTHONPATH"] = os.pathsep.join(path + [job_env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
        try:
            proc = subprocess.run(cmd, env=job_env, capture_output=not verbose, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise RunError(f"hvlite.run.run: the job ran past {timeout} s and was killed") from e
        if proc.returncode != 0:
            tail = ((proc.stdout or "") + (proc.stderr or ""))[-4000:]
            raise RunError(f"hvlite.run.run: the job failed (exit status {proc.returncode}):\n"
                           f"{tail}")
        results = []
        for r in range(int(np)):
            name = os.path.join(work, f"result.{r}")
            if not os.path.exists(name):
                raise RunError(f"hvlite.run.run: rank {r} left no result")
            with open(name, "rb") as f:
                results.append(pickle.load(f))
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)
