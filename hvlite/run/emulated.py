"""Running across the emulated hosts of scripts/cluster.sh exactly as across real ones.

`scripts/cluster.sh up K` leaves its state in $HVLITE_CLUSTER_DIR (default /run/hvlite-cluster):
`hosts` ("name address" lines), `bridge` (where the hosts reach this machine) and `ssh` (an ssh
stand-in that runs a command inside a host's namespaces). When every host of a job is one of
those, hvliterun adds what a real cluster gets from ssh and its network:

* hydra starts each host's proxy through the stand-in (`-launcher ssh -launcher-exec DIR/ssh`),
  and the proxies call back to the bridge's address (`-localhost`), not this machine's name;
* MPI's network layer is kept on the hosts' links: UCX sees one boot id on every emulated host
  and would use shared memory between them (UCX_TLS=tcp,self UCX_NET_DEVICES=eth0); libfabric,
  for the ofi netmod, gets its tcp provider on the same interface. A value already in the
  environment is left as it is.

Real hosts (any host not in the state) change nothing; a job mixing the two is refused.
"""
import os

DIR_ENV = "HVLITE_CLUSTER_DIR"
DEFAULT_DIR = "/run/hvlite-cluster"
NET_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0", "FI_PROVIDER": "tcp",
           "FI_TCP_IFACE": "eth0"}


def state_dir(environ=None):
    return (environ if environ is not None else os.environ).get(DIR_ENV) or DEFAULT_DIR


def cluster_hosts(directory):
    """{name: address} of the emulated cluster that is up, or {} when there is none."""
    try:
        lines = open(os.path.join(directory, "hosts")).read().splitlines()
    except OSError:
        return {}
    hosts = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 2:
            hosts[parts[0]] = parts[1]
    return hosts


def launch_settings(hosts, flavor, environ=None):
    """(extra mpiexec arguments, extra environment for every rank) for a job on `hosts` (names),
    or None when they are not emulated hosts. Raises ValueError for a job that mixes emulated
    and other hosts, or for an MPI whose launcher cannot be pointed at the stand-in."""
    environ = os.environ if environ is None else environ
    directory = state_dir(environ)
    known = cluster_hosts(directory)
    names = list(dict.fromkeys(hosts or ()))
    if not known or not names:
        return None
    emulated = [h for h in names if h in known]
    if not emulated:
        return None
    if len(emulated) != len(names):
        other = [h for h in names if h not in known]
        raise ValueError(f"hosts {emulated} are emulated (scripts/cluster.sh) but {other} are "
                         "not: a job runs on one kind")
    if flavor != "mpich":
        raise ValueError("the emulated cluster needs MPICH's hydra mpiexec (its -launcher-exec "
                         f"starts the proxies inside the hosts); this mpiexec is {flavor}")
    try:
        bridge = open(os.path.join(directory, "bridge")).read().strip()
    except OSError as e:
        raise ValueError(f"emulated cluster state in {directory} is incomplete: {e}") from None
    args = ["-launcher", "ssh", "-launcher-exec", os.path.join(directory, "ssh"),
            "-localhost", bridge]
    env = {k: v for k, v in NET_ENV.items() if k not in environ}
    return args, env
