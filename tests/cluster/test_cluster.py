"""hvlite across hosts, on the emulated cluster of scripts/cluster.sh (2 hosts, unshaped links),
every job started by hvliterun -H as on real hosts.

`make test` runs the short set: topology for block and uneven placement, every collective, all
parameter-server modes, rhd's traffic across the link, a rank killed on one host. The rest is
marked cluster_matrix (`pytest -m cluster_matrix tests/cluster`): alternating and 3+2 placement,
the all-reduce matrix of every algorithm, process sets, train_digits.py, the ofi netmod."""
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from hvlite.run import emulated
import emulated_cluster

matrix = pytest.mark.cluster_matrix
TRAFFIC = os.path.join(ROOT, "tests", "cluster", "mpi_traffic.py")
NEAR = os.path.join(ROOT, "tests", "cluster", "mpi_calibrate_hosts.py")
FAULTY = os.path.join(ROOT, "tests", "run", "faulty.py")


@pytest.fixture(scope="module")
def cluster():
    c, down = emulated_cluster.start()
    try:
        yield c
    finally:
        down()


# ---- the script ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv,words", [(["up", "0"], "K hosts, 1 to 32"),
                                        (["up", "2", "--subnet", "10.1"], "--subnet A.B.C"),
                                        (["up", "2", "3"], "unexpected argument 3"),
                                        (["exec"], "exec HOST")])
def test_script_refuses_bad_arguments(argv, words):
    """Checked before anything is made (no root needed)."""
    run = subprocess.run(["bash", emulated_cluster.SCRIPT, *argv], capture_output=True,
                         text=True, timeout=30)
    assert run.returncode != 0 and words in run.stderr, run


def test_skips_say_why(monkeypatch):
    """Without root (or without a tool) the cross-host tests skip with the reason."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert emulated_cluster.why_not() == "needs root (network and UTS namespaces, a bridge)"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(emulated_cluster.shutil, "which",
                        lambda tool: None if tool == "nsenter" else tool)
    assert emulated_cluster.why_not() == "needs nsenter"


def test_a_failed_up_leaves_nothing():
    """`up 2` failing at the second host (its namespace's name is taken), after the bridge, the
    first host and its /etc/hosts line exist: everything is torn down again and /etc/hosts is
    byte for byte what it was."""
    reason = emulated_cluster.why_not()
    if reason:
        pytest.skip(f"emulated hosts: {reason}")
    if emulated.cluster_hosts(emulated.state_dir()):
        pytest.skip("a cluster is up already")
    hosts = open("/etc/hosts", "rb").read()
    subprocess.run(["ip", "netns", "add", "hvlite-h2"], check=True)
    try:
        run = subprocess.run(["bash", emulated_cluster.SCRIPT, "up", "2"], capture_output=True,
                             text=True, timeout=60)
    finally:
        subprocess.run(["ip", "netns", "del", "hvlite-h2"], capture_output=True)
    assert run.returncode != 0 and "tearing down" in run.stderr, run
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "hvlite-h" not in netns, netns
    bridge = subprocess.run(["ip", "link", "show", "hvlbr0"], capture_output=True, text=True)
    assert bridge.returncode != 0, bridge.stdout
    assert open("/etc/hosts", "rb").read() == hosts
    assert not os.path.exists(os.path.join(emulated.state_dir(), "hosts"))


# ---- topology -----------------------------------------------------------------------------

@pytest.mark.parametrize("hosts", ["h1:2,h2:2", "h1:2,h2:1"])
def test_topology(cluster, hosts):
    """local/cross ranks and sizes against the hosts the ranks really run on (block, uneven)."""
    out = cluster.pytest(hosts, "tests/mpi_runtime.py", "-k", "topology")
    assert out.count("1 passed") == sum(int(h[-1]) for h in hosts.split(",")), out


@matrix
@pytest.mark.parametrize("hosts,n", [("h1:1,h2:1", 4), ("h1:3,h2:2", 5)])
def test_topology_alternating_and_3_2(cluster, hosts, n):
    """4 ranks on -H h1:1,h2:1 alternate hosts (hydra goes round them again: 0, 2 on h1);
    3+2 is uneven the other way."""
    out = cluster.run(hosts, [sys.executable, "-c", PLACEMENT], np=n)[1]
    placed = dict(re.findall(r"placed (\d) (h\d)", out))
    want = {0: "h1", 1: "h2", 2: "h1", 3: "h2"} if n == 4 else \
        {0: "h1", 1: "h1", 2: "h1", 3: "h2", 4: "h2"}
    assert placed == {str(r): h for r, h in want.items()}, out
    out = cluster.pytest(hosts, "tests/mpi_runtime.py", "-k", "topology", np=n)
    assert out.count("1 passed") == n, out


PLACEMENT = ("from mpi4py import MPI; import os, socket; "   # one write: the lines stay whole
             "os.write(1, f'placed {MPI.COMM_WORLD.rank} {socket.gethostname()}\\n'.encode())")


# ---- collectives and algorithms -----------------------------------------------------------

def test_collectives(cluster):
    """Every collective against NumPy, ranks on two hosts."""
    cluster.pytest("h1:2,h2:2", "tests/mpi_collectives.py", timeout=240)


@matrix
@pytest.mark.parametrize("hosts", ["h1:2,h2:2", "h1:2,h2:1"])
def test_allreduce_matrix(cluster, hosts):
    """Every algorithm (hierarchical over the hosts' shared segments included), dtype and op
    against NumPy, bitwise the same on every rank."""
    cluster.pytest(hosts, "tests/_core/mpi_allreduce.py", timeout=400)


@matrix
def test_process_sets(cluster):
    """Process sets whose members span the hosts."""
    cluster.pytest("h1:2,h2:1", "tests/mpi_process_sets.py",
                   env={"HVLITE_DYNAMIC_PROCESS_SETS": "1"}, timeout=240)


def figures(out, head):
    """The numbers of mpi_traffic.py's line that starts with `head` (`traffic ALGO` or `waits
    ALGO`)."""
    line = out.split(head, 1)[1].splitlines()[0]
    return [float(r) for r in re.findall(r"=(\d+\.\d+)", line)]


def test_rhd_keeps_its_largest_exchange_within_a_host(cluster):
    """With ranks placed host by host, rhd's halving starts at distance 1: each host sends n
    bytes per all-reduce of n (per rank n/4 twice), not 2n as with the p/2 partner first."""
    out = cluster.run("h1:2,h2:2", [sys.executable, TRAFFIC, "rhd", "8", "4"])[1]
    ratios = figures(out, "traffic rhd")
    assert len(ratios) == 2 and all(0.95 < r < 1.25 for r in ratios), out


def test_data_waits_across_hosts_leave_the_core(cluster):
    """Over a slow link a rank waits milliseconds for each piece of data; those waits nap
    instead of yielding (liveness.wait_all, Watch.naps), so the rank's CPU time is a small part
    of the wall time and the core stays with compute (a yielding wait costs all of it)."""
    with cluster.shaped("100mbit"):
        out = cluster.run("h1:1,h2:1", [sys.executable, TRAFFIC, "ring", "4", "2"], timeout=120)[1]
    shares = figures(out, "waits ring")
    assert len(shares) == 2 and all(s < 0.5 for s in shares), out
    # and the coordinator thread that drives those transfers is not a batch task across hosts
    # (one node: tests/_core/mpi_coordinator.py): woken from a nap, it runs without waiting for
    # the compute threads' turn to end
    assert re.search(r"^policy 0=other 1=other$", out, re.M), out


def test_auto_across_hosts_skips_what_lost_nearby(cluster):
    """Across hosts a class tries only what did not lose by over 1.5x in a measured class
    nearby, and that class's pick: ring, made to lose at 1 MiB, is not tried at 2 MiB."""
    out = cluster.run("h1:2,h2:2", [sys.executable, NEAR], timeout=180, env={"HVLITE_PROBE": "0"})[1]
    assert "near " in out, out


@matrix
@pytest.mark.parametrize("algorithm,low,high", [("ring", 1.45, 1.7), ("hierarchical", 0.95, 1.25)])
def test_traffic_of_the_other_algorithms(cluster, algorithm, low, high):
    """The same count for ring (1.5n per host: 2(p-1)/p n over one crossing edge) and
    hierarchical (n: the leaders' exchange only)."""
    out = cluster.run("h1:2,h2:2", [sys.executable, TRAFFIC, algorithm, "8", "4"])[1]
    ratios = figures(out, f"traffic {algorithm}")
    assert len(ratios) == 2 and all(low < r < high for r in ratios), out


# ---- parameter server ---------------------------------------------------------------------

def test_parameter_server_modes(cluster):
    """sync, async and ssp with both servers on h2 and both workers on h1: each server
    receives from remote workers while its peer shares its host (the case that hung)."""
    cluster.pytest("h1:2,h2:2", "tests/ps/mpi_ps.py", env={"PS_TEST_SERVERS": "2"}, timeout=180)


@matrix
def test_parameter_server_over_ofi(cluster):
    """The same on MPICH's ofi netmod (libfabric's tcp provider)."""
    cluster.pytest("h1:2,h2:2", "tests/ps/mpi_ps.py",
                   env={"PS_TEST_SERVERS": "2", "MPIR_CVAR_CH4_NETMOD": "ofi"}, timeout=180)


@matrix
@pytest.mark.parametrize("hosts,servers", [("h1:2,h2:1", 1), ("h1:1,h2:2", 1)])
def test_parameter_server_uneven(cluster, hosts, servers):
    cluster.pytest(hosts, "tests/ps/mpi_ps.py", env={"PS_TEST_SERVERS": str(servers)},
                   timeout=180)


# ---- training ------------------------------------------------------------------------------

@matrix
@pytest.mark.parametrize("mode,floor", [("allreduce", 95.0), ("ps-sync", 90.0)])
def test_train_digits(cluster, mode, floor):
    out = cluster.run("h1:2,h2:2", [sys.executable, os.path.join(ROOT, "examples/train_digits.py"),
                                    "--epochs", "10", "--mode", mode], timeout=300)[1]
    acc = float(out.split("test accuracy ")[1].split("%")[0])
    assert acc >= floor, out


# ---- failures ------------------------------------------------------------------------------

def test_a_rank_killed_on_one_host(cluster):
    """Rank 3 (on h2) SIGKILLs itself mid-stream: the job ends within seconds, the summary names
    the rank and its host, and nothing of the job is left running on either host."""
    marker = f"hvlite-cluster-{os.getpid()}-{time.monotonic_ns()}"
    t0 = time.monotonic()
    rc, out, err = cluster.run("h1:2,h2:2", [sys.executable, FAULTY, "kill", "3", marker],
                               check=False, timeout=60)
    took = time.monotonic() - t0
    shown = f"exit {rc} after {took:.1f}s\nstdout:\n{out}\nstderr:\n{err}"
    assert rc != 0 and took < 30, shown
    assert "root cause (first to fail): rank 3 on h2, SIGKILL" in err, shown
    left = [p for p in cluster.namespace_pids()
            if marker.encode() in open(f"/proc/{p}/cmdline", "rb").read()]
    assert not left, f"processes of the job left: {left}\n{shown}"
