"""hvliterun's launch path for scripts/cluster.sh's emulated hosts, from a state directory made
here: which jobs get it, what they get, and what is refused. Nothing is started."""
import pytest

from hvlite.run import emulated
from hvlite.run.launcher import LaunchError, _emulated, build_command, parse_args


@pytest.fixture
def state(tmp_path):
    (tmp_path / "hosts").write_text("h1 10.9.9.11\nh2 10.9.9.12\n")
    (tmp_path / "bridge").write_text("10.9.9.1\n")
    return tmp_path


def test_emulated_hosts_get_the_stand_in_launcher_and_the_links(state):
    args, env = emulated.launch_settings(["h1", "h2", "h1"], "mpich",
                                         {emulated.DIR_ENV: str(state)})
    assert args == ["-launcher", "ssh", "-launcher-exec", str(state / "ssh"),
                    "-localhost", "10.9.9.1"]
    assert env == {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0", "FI_PROVIDER": "tcp",
                   "FI_TCP_IFACE": "eth0"}


def test_a_users_network_setting_is_kept(state):
    _, env = emulated.launch_settings(["h1"], "mpich", {emulated.DIR_ENV: str(state),
                                                        "UCX_TLS": "tcp"})
    assert "UCX_TLS" not in env and env["UCX_NET_DEVICES"] == "eth0"


def test_real_hosts_and_no_cluster_change_nothing(state, tmp_path):
    assert emulated.launch_settings(["node7", "node8"], "mpich",
                                    {emulated.DIR_ENV: str(state)}) is None
    assert emulated.launch_settings(["h1"], "mpich",
                                    {emulated.DIR_ENV: str(tmp_path / "none")}) is None
    assert emulated.launch_settings([], "mpich", {emulated.DIR_ENV: str(state)}) is None


def test_mixed_hosts_and_other_launchers_are_refused(state):
    with pytest.raises(ValueError, match=r"\['h1'\] are emulated .* \['node7'\] are not"):
        emulated.launch_settings(["h1", "node7"], "mpich", {emulated.DIR_ENV: str(state)})
    with pytest.raises(ValueError, match="needs MPICH's hydra"):
        emulated.launch_settings(["h1"], "openmpi", {emulated.DIR_ENV: str(state)})


def test_hvliterun_puts_them_on_the_mpiexec_line(state, monkeypatch):
    monkeypatch.setenv(emulated.DIR_ENV, str(state))
    for k in emulated.NET_ENV:
        monkeypatch.delenv(k, raising=False)
    args = parse_args(["-np", "4", "-H", "h1:2,h2:2", "python", "x.py"])
    extra, env = _emulated(args, "mpich")
    cmd = build_command(args, "/x/mpiexec", "mpich", env)
    cmd[1:1] = extra
    assert cmd[:7] == ["/x/mpiexec", "-launcher", "ssh", "-launcher-exec", str(state / "ssh"),
                       "-localhost", "10.9.9.1"]
    i = cmd.index("UCX_TLS")
    assert cmd[i - 1:i + 2] == ["-genv", "UCX_TLS", "tcp,self"]
    with pytest.raises(LaunchError, match="hvliterun: .*emulated"):
        _emulated(parse_args(["-np", "2", "-H", "h1,node7", "python", "x.py"]), "mpich")
