"""hvliterun: argument parsing, the mpiexec command it builds, its errors, and real runs."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_bounded
from hvlite.run.launcher import LaunchError, build_command, parse_args, parse_hosts, read_hostfile

HVLITERUN = [sys.executable, "-m", "hvlite.run"]


def run(argv, timeout=120):
    """Run hvliterun; on a timeout kill its whole process group (mpiexec and the ranks too)."""
    rc, out, err, _ = run_bounded(HVLITERUN + argv, timeout, f"hvliterun {argv}", cwd=None,
                                  merge_stderr=False)
    return subprocess.CompletedProcess(argv, rc, out, err)


def test_parse_hosts():
    assert parse_hosts("a:4,b:2,c") == [("a", 4), ("b", 2), ("c", 1)]
    assert parse_hosts("node-1.example.org:2,10.0.0.7,gpu_3") == \
        [("node-1.example.org", 2), ("10.0.0.7", 1), ("gpu_3", 1)]
    for bad in ("a:x", "a:0", ":3", "a:", "a b:2"):
        with pytest.raises(LaunchError, match="hvliterun"):
            parse_hosts(bad)


@pytest.mark.parametrize("entry,why", [
    ("-launcher-exec=/tmp/x:2", "begins with '-'"), ("--help", "begins with '-'"),
    (".hidden", "begins with '.'"), ("a;b", "holds ';'"), ("a/b:1", "holds '/'"),
    ("x" * 254, "is longer than 253"), ("$(id)", "holds '$'")])
def test_what_is_not_a_host_name_is_refused_naming_the_entry(tmp_path, entry, why):
    name = entry.split(":")[0]
    with pytest.raises(LaunchError, match=re.escape(f"bad host entry {entry!r}: {name!r} is not "
                                                    f"a host name (it {why}")):
        parse_hosts(f"good:2,{entry}")
    f = tmp_path / "hosts"
    f.write_text(f"good slots=2\n{name} slots=1\n")
    with pytest.raises(LaunchError, match=re.escape(f"is not a host name (it {why}")) as e:
        read_hostfile(f)
    assert str(f) in str(e.value)


def test_hostfile(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# cluster\nnode1 slots=4\nnode2:2\nnode3\n")
    assert read_hostfile(f) == [("node1", 4), ("node2", 2), ("node3", 1)]
    f.write_text("node1 slots=4 extra\n")
    with pytest.raises(LaunchError, match="bad hostfile line"):
        read_hostfile(f)
    with pytest.raises(LaunchError, match="cannot read hostfile"):
        read_hostfile(tmp_path / "missing")


def test_command_for_mpich_and_open_mpi():
    args = parse_args(["-np", "4", "-H", "a:2,b:2", "--fusion-threshold-mb", "32",
                       "--cycle-time-ms", "2", "--algorithm", "ring", "--timeline-filename", "t.json",
                       "python", "train.py", "--lr", "0.1"])
    mpich = build_command(args, "/x/mpiexec", "mpich")
    assert mpich[:5] == ["/x/mpiexec", "-n", "4", "-hosts", "a:2,b:2"]
    assert mpich[-4:] == ["python", "train.py", "--lr", "0.1"]
    assert ["-genv", "HVLITE_FUSION_THRESHOLD", str(32 << 20)] == mpich[5:8] or \
        "HVLITE_FUSION_THRESHOLD" in mpich
    i = mpich.index("HVLITE_CYCLE_TIME")
    assert mpich[i - 1:i + 2] == ["-genv", "HVLITE_CYCLE_TIME", "2.0"]
    assert mpich[mpich.index("HVLITE_ALLREDUCE_ALGORITHM") + 1] == "ring"
    ompi = build_command(args, "/y/mpiexec", "openmpi")
    assert ompi[3:5] == ["-H", "a:2,b:2"]
    assert "-x" in ompi and f"HVLITE_FUSION_THRESHOLD={32 << 20}" in ompi and "HVLITE_TIMELINE=t.json" in ompi


@pytest.mark.parametrize("argv,fragment", [
    (["python", "x.py"], "-np N is required"),
    (["-np", "2"], "no command given"),
])
def test_launch_errors(argv, fragment):
    with pytest.raises(LaunchError, match=fragment):
        parse_args(argv)


@pytest.mark.parametrize("argv,fragment", [
    (["-np", "0", "python"], "positive integer"),
    (["-np", "two", "python"], "positive integer"),
    (["-np", "2", "-H", "a:x", "python"], "bad slot count"),
    (["-np", "2", "-H=-launcher-exec=/nonexistent/x:2", "python"],
     "bad host entry '-launcher-exec=/nonexistent/x:2': '-launcher-exec=/nonexistent/x' is not a "
     "host name (it begins with '-'"),
    (["--elastic", "-np", "2", "-H=a:1,-x:1", "python"], "'-x' is not a host name"),
    (["-np", "2", "--mpiexec", "/nonexistent/mpiexec", "python"], "not found"),
])
def test_cli_errors_exit_nonzero_with_a_message(argv, fragment):
    out = run(argv, timeout=60)
    assert out.returncode != 0
    if fragment:
        assert fragment in out.stderr


def test_end_to_end_two_ranks(tmp_path):
    code = ("import hvlite as hvd, numpy as np, pathlib; hvd.init(); s = hvd._current().settings; "
            f"pathlib.Path({str(tmp_path)!r}, str(hvd.rank())).write_text("
            "repr((hvd.allreduce(np.ones(2), op=hvd.Sum).tolist(), s.fusion_threshold, s.cycle_time_ms)))")
    out = run(["-np", "2", "--fusion-threshold-mb", "8", "--cycle-time-ms", "3", sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    for r in range(2):      # each rank's view, written to a file (rank output interleaves)
        assert (tmp_path / str(r)).read_text() == repr(([2.0, 2.0], 8 << 20, 3.0))


def test_exit_status_of_the_job():
    out = run(["-np", "2", sys.executable, "-c", "import sys; sys.exit(3)"])
    assert out.returncode == 3


def test_sigterm_is_forwarded_to_the_job(tmp_path):
    marker = tmp_path / "started"
    code = (f"import time, pathlib; pathlib.Path({str(marker)!r} + str(__import__('os').getpid())).touch(); "
            "time.sleep(60)")
    proc = subprocess.Popen(HVLITERUN + ["-np", "2", sys.executable, "-c", code],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("started*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc != 0 and time.monotonic() - t0 < 20
    assert "hvliterun received SIGTERM and passed it to the job" in proc.stderr.read().decode()


def test_check_build():
    out = run(["--check-build"], timeout=60)
    assert out.returncode == 0, out.stderr
    for fragment in ("hvlite v", "MPI library", "thread level", "ring", "rhd", "auto crossovers",
                     "16 ranks, 4 nodes", "hierarchical", "HVLITE_CALIBRATE",
                     "core linked to:", "GPU buffers:"):
        assert fragment in out.stdout
    # across nodes the shm path is named for what runs: the segment, then between the nodes
    nodes_line = next(line for line in out.stdout.splitlines() if "4 nodes" in line)
    assert re.search(r"(?<!over )\bshm\b", nodes_line) is None, nodes_line
    # the core calls the library mpi4py started (the same library's version line)
    said = dict(line.strip().split(":", 1) for line in out.stdout.splitlines()[1:3] + [
        next(line for line in out.stdout.splitlines() if "core linked to" in line)])
    assert said["core linked to"].strip() == said["MPI library"].strip(), out.stdout


def test_real_names():
    from hvlite.runtime import real_names
    assert real_names("rd < 4 KiB <= shm", 1) == "rd < 4 KiB <= shm"
    assert real_names("rd < 4 KiB <= shm", 2) == "rd < 4 KiB <= hierarchical over shm"


def test_a_bare_python_runs_hvliteruns_own_interpreter(monkeypatch, tmp_path):
    from hvlite.run.launcher import own_python
    monkeypatch.setenv("PATH", str(tmp_path))           # no python on PATH at all
    assert own_python(["python", "train.py", "-x"], False) == [sys.executable, "train.py", "-x"]
    assert own_python(["python3", "t.py"], False) == [sys.executable, "t.py"]
    assert own_python(["python", "t.py"], True) == ["python", "t.py"]      # across hosts: as given
    assert own_python(["/usr/bin/env", "python"], False) == ["/usr/bin/env", "python"]
    (tmp_path / "python").symlink_to(sys.executable)     # PATH's python is this one: unchanged
    assert own_python(["python", "t.py"], False) == ["python", "t.py"]


def test_mpiexec_beside_the_mpi_library_hvlite_runs_on(monkeypatch, tmp_path):
    from hvlite.run import launcher
    prefix = tmp_path / "mpi"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "bin").mkdir()
    (prefix / "lib" / "libmpi.so.40").write_bytes(b"")
    exe = prefix / "bin" / "mpiexec"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setattr(launcher, "loaded_libmpi", lambda: [str(prefix / "lib" / "libmpi.so.40")])
    monkeypatch.setattr(launcher.sys, "executable", str(tmp_path / "elsewhere" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("HVLITE_MPIEXEC", raising=False)
    assert launcher.find_mpiexec() == str(exe)
    assert launcher.beside_libmpi() == str(exe)


def test_the_core_reports_the_mpi_library_it_loaded():
    from hvlite.run.launcher import loaded_libmpi
    libs = loaded_libmpi()
    assert libs and all("libmpi" in lib for lib in libs), libs
