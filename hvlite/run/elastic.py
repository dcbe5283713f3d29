"""hvliterun --elastic: run a job, and when it fails, relaunch it on the slots still available;
when hosts are added, have it stop at its next commit and relaunch it larger.

    hvliterun --elastic --min-np A --max-np B [-np N] [-H hosts | --hostfile F |
              --host-discovery-script S] [--max-restarts K] [--elastic-dir D] command ...

MPI cannot shrink or grow a running job portably, so this is torchrun's design on top of MPI:
each launch is an ordinary hvliterun job (mpiexec, the rank supervisor, the failure summary,
the clean-up), and the workers' `hvlite.elastic.run` syncs each launch to the newest commit
every surviving rank holds (hvlite/elastic). Between launches this supervisor decides:

* a rank's non-zero exit or signal, or a host gone from discovery (the job is then stopped):
  a restart, counted against --max-restarts, on min(B, available slots) ranks;
* the job stopped at a commit because discovery showed more slots (rank 0 leaves a note,
  hvlite.elastic.STOPPED): a relaunch on more ranks, not counted as a restart;
* fewer than A slots (after waiting up to --elastic-timeout for discovery to show them), or
  more than K restarts: give up with the last failure's summary and status.

Every launch gets HVLITE_ELASTIC_DIR (the commits), HVLITE_ELASTIC_RESTART (launches before it)
and HVLITE_ELASTIC_CAUSE (why it was started); each restart is logged with its cause on stderr,
and with a timeline on, launch k > 0 writes `<name>.launch<k><ext>`, where the workers mark the
restart. Growth: discovery runs every --discovery-interval s while the job runs; on more slots
this writes hvlite.elastic.NOTICE into the commit directory, which rank 0 looks for at each
commit. The directory must therefore be one rank 0 and this host both see.
"""
import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from hvlite.elastic.state import CAUSE_ENV, DIR_ENV, NOTICE, RESTART_ENV, STOPPED
from hvlite.elastic.store import private_dir, write_atomic
from hvlite.run import cleanup, summary
from hvlite.run.hosts import bad_host_name
from hvlite.run.rank import STATUS_DIR_ENV

RANK_WRAPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank.py")
STOP_GRACE = 5.0            # seconds a stopped job gets between SIGTERM and SIGKILL
DISCOVERY_TIMEOUT = 30.0    # seconds one run of the discovery script may take


class ElasticError(Exception):
    """A discovery script that fails or prints something that is not 'host:slots' lines."""


def _count(name, least):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{name} must be at least {least}, got {text!r}")
        return value
    return parse


def add_arguments(p):
    """The elastic options, on hvliterun's parser."""
    g = p.add_argument_group("elastic training (docs/elastic.md)")
    g.add_argument("--elastic", action="store_true",
                   help="relaunch the job on failures and when hosts are added; workers resume "
                        "from their last hvlite.elastic commit")
    g.add_argument("--min-np", type=_count("--min-np", 1),
                   help="fewest ranks to run on (default: -np, else 1)")
    g.add_argument("--max-np", type=_count("--max-np", 1),
                   help="most ranks to run on (default: -np)")
    g.add_argument("--host-discovery-script",
                   help="a command printing the available hosts, one 'host:slots' per line; run "
                        "before each launch and every --discovery-interval s")
    g.add_argument("--discovery-interval", type=float,
                   help="seconds between discovery runs (default 1)")
    g.add_argument("--max-restarts", type=_count("--max-restarts", 0),
                   help="failures to restart from before giving up (default 3; relaunches for "
                        "new hosts do not count)")
    g.add_argument("--elastic-dir",
                   help="where the ranks commit (HVLITE_ELASTIC_DIR; default: a directory made "
                        "for the job, removed when it succeeds); kept, so a later job with the "
                        "same directory resumes from its last commit")
    g.add_argument("--elastic-timeout", type=float,
                   help="seconds to wait for --min-np slots from discovery before giving up "
                        "(default 60)")


_ELASTIC_ONLY = (("min_np", "--min-np"), ("max_np", "--max-np"),
                 ("host_discovery_script", "--host-discovery-script"),
                 ("discovery_interval", "--discovery-interval"),
                 ("max_restarts", "--max-restarts"), ("elastic_dir", "--elastic-dir"),
                 ("elastic_timeout", "--elastic-timeout"))
DEFAULTS = {"discovery_interval": 1.0, "max_restarts": 3, "elastic_timeout": 60.0}


def check_args(args):
    """A message for an elastic command line that cannot work, or None; fills in the defaults,
    --min-np and --max-np from -np."""
    if not args.elastic:
        given = [flag for name, flag in _ELASTIC_ONLY if getattr(args, name) is not None]
        return f"hvliterun: {', '.join(given)} only apply with --elastic" if given else None
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.host_discovery_script and (args.hosts or args.hostfile):
        return "hvliterun: give -H/--hostfile or --host-discovery-script, not both"
    if args.servers:
        return "hvliterun: --elastic does not apply to parameter-server jobs (--servers)"
    if not args.supervise:
        return "hvliterun: --elastic needs the rank supervisor (no --no-supervise)"
    if not args.discovery_interval > 0 or not args.elastic_timeout >= 0:
        return "hvliterun: --discovery-interval must be positive and --elastic-timeout >= 0"
    if args.min_np is None:
        args.min_np = args.np or 1
    if args.max_np is None:
        args.max_np = args.np
    if args.max_np is None:
        return "hvliterun: --elastic needs --max-np (or -np) to know how large the job may grow"
    if args.min_np > args.max_np:
        return f"hvliterun: --min-np {args.min_np} is more than --max-np {args.max_np}"
    if args.np is not None and not args.min_np <= args.np <= args.max_np:
        return (f"hvliterun: -np {args.np} is outside --min-np {args.min_np} .. --max-np "
                f"{args.max_np}")
    return None


def parse_discovery(text):
    """A discovery script's output -> [(host, slots)]: one 'host:slots' or 'host' per line
    (Horovod's format); blank lines and # comments are skipped; a host named twice adds up."""
    hosts = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, slots = line.partition(":")
        name = name.strip()
        try:
            n = int(slots) if sep else 1
        except ValueError:
            n = -1
        if not name or any(c.isspace() for c in name) or n < 0:
            raise ElasticError(f"discovery printed {raw.strip()!r}; expected 'host:slots'")
        problem = bad_host_name(name)
        if problem:
            raise ElasticError(f"discovery printed {raw.strip()!r}: {problem}")
        hosts[name] = hosts.get(name, 0) + n
    return [(h, n) for h, n in hosts.items() if n > 0]


def allocate(hosts, np_):
    """The first `np_` slots of `hosts`, host by host: [(host, ranks)]."""
    out, left = [], np_
    for host, slots in hosts:
        if left <= 0:
            break
        take = min(slots, left)
        out.append((host, take))
        left -= take
    return out


def describe(record):
    """A failed rank's record as one line: 'rank 1 on h, killed by SIGKILL: first error'."""
    if record is None:
        return None
    rank = "rank ?" if record.get("rank") is None else f"rank {record['rank']}"
    how = (f"killed by {record['signal']}" if record.get("signal") else
           f"exit code {record.get('exit_code')}" if record.get("state") == "exited" else
           "killed by mpiexec after its error")
    line = f"{rank} on {record.get('host', '?')}, {how}"
    return line + (f": {record['first_error']}" if record.get("first_error") else "")


def launch_path(path, launch):
    """The timeline file of launch `launch` (> 0): <name>.launch<k><ext>."""
    root, ext = os.path.splitext(path)
    return f"{root}.launch{launch}{ext or '.json'}"


class Elastic:
    """The supervisor: one object per hvliterun --elastic."""

    def __init__(self, args, mpiexec, flavor, build_command, settings, static_hosts):
        self.args, self.mpiexec, self.flavor = args, mpiexec, flavor
        self.build_command = build_command
        self.env = dict(os.environ)
        self.env.update(settings)
        self.timeline = settings.get("HVLITE_TIMELINE") or os.environ.get("HVLITE_TIMELINE") \
            or os.environ.get("HOROVOD_TIMELINE")
        self.static_hosts = static_hosts
        self.proc = None
        self.received = []

    def log(self, message):
        print(f"hvliterun: elastic: {message}", file=sys.stderr, flush=True)

    # -- hosts ----------------------------------------------------------------------------------

    def discover(self):
        """[(host or None for this machine, slots)] available now."""
        script = self.args.host_discovery_script
        if script is None:
            return list(self.static_hosts) if self.static_hosts else [(None, self.args.max_np)]
        try:
            out = subprocess.run(script, shell=True, capture_output=True, text=True,
                                 timeout=DISCOVERY_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise ElasticError(f"discovery script {script!r} ran past {DISCOVERY_TIMEOUT:g} s") \
                from None
        if out.returncode != 0:
            raise ElasticError(f"discovery script {script!r} exited {out.returncode}: "
                               f"{(out.stderr.strip().splitlines() or [''])[-1]}")
        return parse_discovery(out.stdout)

    def wait_for_slots(self):
        """The hosts once they offer --min-np slots; None (and a message) when they do not
        within --elastic-timeout (static hosts: at once)."""
        deadline = time.monotonic() + self.args.elastic_timeout
        problem = None
        while True:
            try:
                hosts = self.discover()
                problem = None
            except ElasticError as e:
                hosts, problem = [], str(e)
            total = sum(n for _, n in hosts)
            if total >= self.args.min_np:
                return hosts
            if self.args.host_discovery_script is None or time.monotonic() >= deadline or \
                    self.received:
                why = problem or f"only {total} slot(s) available"
                self.log(f"{why}, fewer than --min-np {self.args.min_np}"
                         + (f" after waiting {self.args.elastic_timeout:g} s"
                            if self.args.host_discovery_script else "") + ": giving up")
                return None
            time.sleep(self.args.discovery_interval)

    # -- one launch -----------------------------------------------------------------------------

    def command(self, launch, alloc, cause, status_dir, token):
        ns = argparse.Namespace(**vars(self.args))
        ns.np = sum(n for _, n in alloc)
        ns.hosts = ",".join(f"{h}:{n}" for h, n in alloc) if any(h for h, _ in alloc) else None
        ns.hostfile = None
        job_env = {cleanup.JOB_ENV: token, STATUS_DIR_ENV: status_dir, DIR_ENV: self.directory,
                   RESTART_ENV: str(launch), CAUSE_ENV: cause or ""}
        if launch and self.timeline:
            job_env["HVLITE_TIMELINE"] = launch_path(self.timeline, launch)
        return self.build_command(ns, self.mpiexec, self.flavor, job_env,
                                  (sys.executable, RANK_WRAPPER))

    def run_once(self, launch, alloc, cause):
        """Run one launch to its end. Returns (outcome, status, cause): outcome is "done",
        "grow" (stopped at a commit for new hosts), "failed" or "interrupted"."""
        np_ = sum(n for _, n in alloc)
        for name in (NOTICE, STOPPED):
            try:
                os.unlink(os.path.join(self.directory, name))
            except OSError:
                pass
        try:
            status_dir = tempfile.mkdtemp(prefix="hvliterun-", dir=self.args.status_dir)
        except OSError as e:
            self.log(f"cannot make a status directory: {e.strerror}")
            return "failed", 2, "no status directory"
        token = secrets.token_hex(8)
        cmd = self.command(launch, alloc, cause, status_dir, token)
        if self.args.verbose:
            print("hvliterun: " + " ".join(cmd), file=sys.stderr, flush=True)
        shm_before = cleanup.shm_listing()
        try:
            self.proc = subprocess.Popen(cmd, env=self.env)
        except OSError as e:
            shutil.rmtree(status_dir, ignore_errors=True)
            self.log(f"cannot start {cmd[0]}: {e.strerror}")
            return "failed", 2, f"cannot start {cmd[0]}"
        stopped_for, posted = None, False
        try:
            while True:
                try:
                    rc = self.proc.wait(timeout=self.args.discovery_interval)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if self.args.host_discovery_script is None or stopped_for or self.received:
                    continue
                try:
                    hosts = dict(self.discover())
                except ElasticError as e:
                    self.log(f"{e} (keeping the job as it is)")
                    continue
                gone = [(h, n, hosts.get(h, 0)) for h, n in alloc if hosts.get(h, 0) < n]
                if gone:
                    h, n, now = gone[0]
                    stopped_for = (f"host {h} gone from discovery" if now == 0 else
                                   f"host {h} down to {now} slot(s) in discovery, {n} in use")
                    self.log(f"{stopped_for}: stopping the job")
                    self.stop_job()
                elif not posted and min(sum(hosts.values()), self.args.max_np) > np_:
                    posted = True
                    try:
                        post_notice(self.directory, sum(hosts.values()))
                    except OSError as e:
                        self.log(f"cannot post the notice for new hosts: {e}")
                        continue
                    self.log(f"discovery shows {sum(hosts.values())} slot(s), {np_} in use: "
                             "asking the job to stop at its next commit")
            rc = rc if rc >= 0 else 128 - rc
            records = summary.read_records(status_dir)
            failed = summary.job_failed(records, rc) or stopped_for is not None
            status = rc if rc != 0 or not failed else 1
            if not failed:
                grew = os.path.exists(os.path.join(self.directory, STOPPED))
                return ("grow" if grew else "done"), 0, None
            if stopped_for is None and records:
                text = summary.format_summary(
                    records, status, self.args.command, np_,
                    signal.Signals(self.received[0]).name if self.received else None)
                print(text, file=sys.stderr, flush=True)
            why = stopped_for or describe(summary.root_cause(records)) or \
                f"mpiexec exited with status {rc}"
            return ("interrupted" if self.received else "failed"), status, why
        finally:
            killed = cleanup.end_job_processes(token)
            if killed:
                self.log(f"killed {len(killed)} leftover process(es) of the job: "
                         f"{' '.join(map(str, killed))}")
            removed = cleanup.clean_shm(shm_before)
            if removed:
                self.log(f"removed {len(removed)} shared-memory file(s) left in /dev/shm")
            shutil.rmtree(status_dir, ignore_errors=True)
            self.proc = None

    def stop_job(self):
        """SIGTERM to mpiexec (it passes it to the ranks), SIGKILL after STOP_GRACE s."""
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        except OSError:
            pass

    def forward(self, signum, frame):
        self.received.append(signum)
        if self.proc is not None:
            try:
                self.proc.send_signal(signum)
            except OSError:
                pass

    # -- the loop -------------------------------------------------------------------------------

    def run(self):
        args = self.args
        given = args.elastic_dir or os.environ.get(DIR_ENV)
        try:
            self.directory = prepare_directory(given)
        except OSError as e:
            print(f"hvliterun: cannot use the elastic directory {given!r}: {e.strerror}",
                  file=sys.stderr)
            return 2
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self.forward)
        launch, restarts, cause, status, np_ = 0, 0, None, 1, None
        while True:
            hosts = self.wait_for_slots()
            if hosts is None:
                break
            total = sum(n for _, n in hosts)
            want = args.np if launch == 0 and args.np else args.max_np
            alloc = allocate(hosts, min(want, total, args.max_np))
            np_ = sum(n for _, n in alloc)
            where = ",".join(f"{h}:{n}" for h, n in alloc) if alloc[0][0] else "this host"
            self.log(f"launch {launch}: {np_} rank(s) on {where}"
                     + (f" ({cause})" if cause else ""))
            outcome, status, why = self.run_once(launch, alloc, cause)
            if outcome == "done":
                self.log(f"the job finished after {restarts} restart(s) and {launch + 1} "
                         "launch(es)")
                if not given:
                    shutil.rmtree(self.directory, ignore_errors=True)
                return 0
            if outcome == "interrupted":
                self.log(f"hvliterun received {signal.Signals(self.received[0]).name}: not "
                         "restarting")
                break
            launch += 1
            if outcome == "grow":
                cause = f"hosts added (the job had {np_} rank(s))"
                self.log(f"the job stopped at a commit for new hosts ({cause}; not counted as "
                         "a restart)")
                continue
            if restarts >= args.max_restarts:
                self.log(f"giving up: {why}; {restarts} restart(s) already, --max-restarts "
                         f"{args.max_restarts}")
                break
            restarts += 1
            cause = f"restart {restarts}/{args.max_restarts} after {why}"
            self.log(cause)
        if os.listdir(self.directory):
            self.log(f"the commits are kept in {self.directory}: run again with --elastic-dir "
                     f"{self.directory} to resume from the last one")
        elif not given:
            shutil.rmtree(self.directory, ignore_errors=True)
        return status


def prepare_directory(given):
    """The commit directory: `given` (made with mode 0700 if missing), or a new one; one that is
    not this user's own directory is refused (raises OSError, its strerror saying why)."""
    if not given:
        return tempfile.mkdtemp(prefix="hvliterun-elastic-")
    return private_dir(os.path.abspath(given))


def post_notice(directory, slots):
    """Tell rank 0 that `slots` slots are available (the notice it looks for at each commit),
    through a private temporary renamed into place: a link planted at the name is replaced."""
    write_atomic(os.path.join(directory, NOTICE), [f"{slots}\n".encode()])


def main(args, mpiexec, flavor, build_command, settings, static_hosts):
    """hvliterun's entry for --elastic (the launcher hands over its pieces: no import back)."""
    return Elastic(args, mpiexec, flavor, build_command, settings, static_hosts).run()
