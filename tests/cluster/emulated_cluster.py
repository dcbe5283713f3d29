"""The emulated cluster for the cross-host tests: brought up once by scripts/cluster.sh (or one
already up is used and left up), jobs started on it through hvliterun -H under a hard timeout.

Emulated hosts need root and network namespaces; where they are not allowed the tests skip,
saying why, rather than run on one host and prove nothing."""
import contextlib
import os
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, run_bounded
from hvlite.run import emulated

SCRIPT = os.path.join(ROOT, "scripts", "cluster.sh")
HOSTS = 2


def why_not():
    """The reason emulated hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (network and UTS namespaces, a bridge)"
    for tool in ("ip", "unshare", "nsenter"):
        if not shutil.which(tool):
            return f"needs {tool}"
    probe = f"hvlite-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"network namespaces are not allowed here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    uts = subprocess.run(["unshare", "--uts", "true"], capture_output=True, text=True)
    if uts.returncode:
        return f"UTS namespaces are not allowed here: {uts.stderr.strip()}"
    return None


class Cluster:
    def __init__(self, hosts, owned):
        self.hosts, self.owned = hosts, owned

    def namespace_pids(self):
        pids = []
        for h in self.hosts:
            out = subprocess.run(["ip", "netns", "pids", f"hvlite-{h}"], capture_output=True,
                                 text=True).stdout
            pids += [int(p) for p in out.split()]
        return pids

    def kill_leftovers(self):
        """What a timed-out job left inside the hosts (hydra's proxies run there)."""
        for pid in self.namespace_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    @contextlib.contextmanager
    def shaped(self, rate):
        """Every link shaped to `rate` (tc's token bucket, both directions) for the block, then
        back to what it was (`scripts/cluster.sh shape`)."""
        before = open(os.path.join(emulated.state_dir(), "rate")).read().strip() or "unshaped"

        def shape(r):
            done = subprocess.run(["bash", SCRIPT, "shape", r], capture_output=True, text=True,
                                  timeout=60)
            if done.returncode:
                pytest.fail(f"scripts/cluster.sh shape {r} failed:\n{done.stdout}{done.stderr}",
                            pytrace=False)
        shape(rate)
        try:
            yield
        finally:
            shape("none" if before == "unshaped" else before)

    def run(self, hosts, argv, timeout=120, env=None, check=True, np=None):
        """hvliterun -np N -H `hosts` argv..., with this checkout first on every rank's path;
        N defaults to the slots. Returns (returncode, stdout, stderr)."""
        np = np or sum(int(h.partition(":")[2] or 1) for h in hosts.split(","))
        cmd = [sys.executable, "-m", "hvlite.run", "-np", str(np), "-H", hosts, *argv]
        full = dict(os.environ, PYTHONUNBUFFERED="1",
                    PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")] +
                                               [p for p in [os.environ.get("PYTHONPATH")] if p]))
        full.update(env or {})
        rc, out, err, took = run_bounded(cmd, timeout, f"hvliterun -H {hosts} {argv}", env=full,
                                         merge_stderr=False, on_timeout=self.kill_leftovers)
        if check and rc != 0:
            pytest.fail(f"hvliterun -H {hosts} {argv} (env {env or {}}) exited {rc} after "
                        f"{took:.1f}s\nstdout:\n{out}\nstderr:\n{err}", pytrace=False)
        return rc, out, err

    def pytest(self, hosts, target, *args, timeout=180, env=None, np=None):
        """A rank-side pytest module on every rank; its output."""
        return self.run(hosts, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "--no-header", "-rfE", os.path.join(ROOT, target), *args],
                        timeout=timeout, env=env, np=np)[1]


def start():
    """A Cluster of HOSTS hosts, or skip. Returns it and a function that takes it down (a
    no-op for a cluster that was up already)."""
    reason = why_not()
    if reason:
        pytest.skip(f"emulated hosts: {reason}")
    known = emulated.cluster_hosts(emulated.state_dir())
    if known:
        names = [f"h{i}" for i in range(1, HOSTS + 1)]
        if not all(n in known for n in names):
            pytest.skip(f"a cluster is up already without hosts {names}; scripts/cluster.sh down")
        return Cluster(names, owned=False), lambda: None
    up = subprocess.run(["bash", SCRIPT, "up", str(HOSTS)], capture_output=True, text=True,
                        timeout=120)
    if up.returncode:
        pytest.fail(f"scripts/cluster.sh up {HOSTS} failed:\n{up.stdout}\n{up.stderr}",
                    pytrace=False)
    cluster = Cluster([f"h{i}" for i in range(1, HOSTS + 1)], owned=True)

    def down():
        cluster.kill_leftovers()
        subprocess.run(["bash", SCRIPT, "down"], capture_output=True, timeout=120)
    return cluster, down
