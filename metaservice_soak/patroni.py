"""A PostgreSQL that survives its primary, for the soak and its tests: etcd, three Patroni
members with synchronous replication and haproxy sending clients to the leader, all on free
loopback ports in a temporary directory, run with the repository's ``deploy/patroni/`` files.

    cluster = PatroniCluster(Path("/tmp/soak/patroni")).start()
    cluster.url                    # postgresql+psycopg://postgres@127.0.0.1:HAPROXY/soak
    cluster.leader()               # "pg2": Patroni's GET /cluster
    change = cluster.kill_leader() # SIGKILL the leader's Patroni and its PostgreSQL
    change.old, change.new         # "pg2", "pg1" (checked: the leader changed)
    cluster.recover()              # the killed member starts again and rejoins as a standby
    cluster.isolate_leader()       # SIGSTOP its Patroni: it cannot renew its key in etcd
    cluster.recover()              # its member killed and started: it rejoins, rewound
    cluster.switchover()           # POST /switchover to the leader's REST API
    cluster.stop()

Each member is ``patroni`` with ``deploy/patroni/patroni.yml``, its own values (name, REST and
PostgreSQL addresses, data and socket directories, the server's binaries) written over the
file's into the member's own copy, as each host of a deployment has; etcd is Debian's
``etcd-server`` (3.4, the v3 API: Patroni's ``etcd3:``), one node; haproxy runs
``deploy/patroni/haproxy.cfg`` as it is. As with :class:`~metaservice_soak.postgres.
PrivateCluster`, when the harness runs as root the members run as the ``postgres`` OS user
(``initdb`` refuses root) in a directory of that user's under the system's temporary directory
(``metaservice-patroni-*``), linked from ``root``.

A failover, not a restart: Patroni restarts a PostgreSQL that died under it in place, so each
fault takes the leader's Patroni away too — killed with its PostgreSQL (each is its own process
group: Patroni starts the postmaster in a session of its own), frozen so that its leader key in
etcd expires, or asked to hand over. Each fault waits until another member is the leader and
raises :class:`PatroniError` if none is within ``timeout``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from metaservice_soak.postgres import DATABASE, OS_USER_WHEN_ROOT, server_binary
from metaservice_soak.replicas import haproxy_command, log_tail
from metaservice_soak.spark_cluster import free_port

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "patroni"
PATRONI_CONFIG = DEPLOY / "patroni.yml"
HAPROXY_CONFIG = DEPLOY / "haproxy.cfg"
MEMBERS = 3
PASSWORD = "soak"  # loopback only, a throw-away cluster's


class PatroniError(RuntimeError):
    """etcd, a member or haproxy did not start, or a fault did not change the leader."""


def missing_programs() -> list[str]:
    """The programs the cluster needs that are not installed (empty when all are)."""
    found = {"etcd": shutil.which("etcd"), "patroni": shutil.which("patroni"),
             "patronictl": shutil.which("patronictl"), "haproxy": haproxy_command()}
    absent = [name for name, path in found.items() if path is None]
    try:
        server_binary("initdb")
    except RuntimeError:
        absent.append("initdb")
    return absent


@dataclass
class Member:
    """One Patroni member: its Patroni process (a process group of its own) and its ports."""

    name: str
    home: Path
    pg_port: int
    api_port: int
    process: subprocess.Popen[bytes] | None = None
    frozen: bool = False

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def config(self) -> Path:
        return self.home / "patroni.yml"

    @property
    def log(self) -> Path:
        return self.home / "patroni.log"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def postmaster_pid(self) -> int | None:
        """The postmaster's pid from its ``postmaster.pid``, if it runs."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid


@dataclass
class LeaderChange:
    """One forced failover: which member led before and after, when the fault began (wall
    clock, seconds) and how long until another member led (as Patroni's ``/cluster`` said)."""

    kind: str
    old: str
    new: str
    started_at: float
    elected_after: float
    details: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {"kind": self.kind, "old": self.old, "new": self.new,
                "started_at": self.started_at, "elected_after": round(self.elected_after, 2),
                **self.details}


class PatroniCluster:
    """etcd, ``members`` Patroni members and haproxy in ``root`` (see the module docstring)."""

    def __init__(self, root: Path, *, members: int = MEMBERS,
                 database: str = DATABASE) -> None:
        self.os_user = OS_USER_WHEN_ROOT if os.geteuid() == 0 else None
        self.root = root
        self.home = (Path(tempfile.mkdtemp(prefix="metaservice-patroni-"))
                     if self.os_user is not None else root)
        self.database = database
        self.scope = f"soak-{os.getpid()}-{free_port()}"
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd_process: subprocess.Popen[bytes] | None = None
        self.haproxy_port = free_port()
        self.haproxy_process: subprocess.Popen[bytes] | None = None
        self.members = [Member(f"pg{i + 1}", self.home / f"pg{i + 1}", free_port(), free_port())
                        for i in range(members)]
        # Patroni runs every server program from one directory (pg_controldata, pg_rewind,
        # pg_basebackup too): the real one behind a symbolic link such as /usr/local/bin/initdb
        self.bin_dir = Path(server_binary("initdb")).resolve().parent
        self.changes: list[LeaderChange] = []
        self.down: Member | None = None  # the member a fault took away, until recover()

    # -- what clients use -------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the soak's database through haproxy (always the leader)."""
        return (f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:{self.haproxy_port}/"
                f"{self.database}?connect_timeout=5")

    @property
    def multihost_url(self) -> str:
        """The same database through libpq's own failover: every member, the one that takes
        writes (``target_session_attrs=read-write``); docs/operations.md says when to prefer
        haproxy."""
        hosts = ",".join(f"127.0.0.1:{m.pg_port}" for m in self.members)
        return (f"postgresql+psycopg://postgres:{PASSWORD}@/{self.database}?host={hosts}"
                "&target_session_attrs=read-write&connect_timeout=5")

    @property
    def haproxy_log(self) -> Path:
        return self.home / "haproxy.log"

    @property
    def etcd_log(self) -> Path:
        return self.home / "etcd.log"

    def member(self, name: str) -> Member:
        return next(m for m in self.members if m.name == name)

    # -- life cycle -------------------------------------------------------------------------

    def _own(self, path: Path) -> None:
        if self.os_user is not None:
            user = pwd.getpwnam(self.os_user)
            os.chown(path, user.pw_uid, user.pw_gid)

    def start(self, timeout: float = 180) -> PatroniCluster:
        """etcd, then every member; once a leader runs and every standby streams from it
        synchronously or not, the database, then haproxy."""
        if missing := missing_programs():
            raise PatroniError(f"not installed: {', '.join(missing)} (bash "
                               ".ci/install-system-packages.sh installs etcd-server, patroni, "
                               "haproxy and PostgreSQL)")
        if self.home != self.root:
            self.root.parent.mkdir(parents=True, exist_ok=True)
            self.root.symlink_to(self.home, target_is_directory=True)
        self.home.mkdir(parents=True, exist_ok=True)
        self._own(self.home)
        self._start_etcd()
        for member in self.members:
            member.home.mkdir(exist_ok=True)
            (member.home / "socket").mkdir(exist_ok=True)
            for path in (member.home, member.home / "socket"):
                self._own(path)
            member.config.write_text(json.dumps(self._member_config(member), indent=2))
            self._own(member.config)
            self._spawn(member)
        deadline = time.monotonic() + timeout
        leader = self.wait_for_leader(deadline=deadline)
        self._create_database(self.member(leader))
        self.wait_for_replicas(len(self.members) - 1, deadline=deadline)
        self._start_haproxy()
        self._wait_checked(leader, deadline)
        self._wait_writable(deadline)
        return self

    def _start_etcd(self) -> None:
        etcd = shutil.which("etcd")
        assert etcd is not None
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        with self.etcd_log.open("ab") as out:
            self.etcd_process = subprocess.Popen(
                [etcd, "--name", "etcd1", "--data-dir", str(self.home / "etcd"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"etcd1={peer}", "--initial-cluster-state", "new",
                 "--initial-cluster-token", self.scope],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, cwd="/")
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{client}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.etcd_process.poll() is not None or time.monotonic() > deadline:
                raise PatroniError(f"etcd did not start:\n{log_tail(self.etcd_log)}")
            time.sleep(0.2)

    def _member_config(self, member: Member) -> dict[str, Any]:
        """deploy/patroni/patroni.yml with this member's own values (and the soak's ports,
        directories and throw-away passwords) written over the file's."""
        import yaml

        config: dict[str, Any] = yaml.safe_load(PATRONI_CONFIG.read_text())
        config["scope"] = self.scope
        config["name"] = member.name
        api = f"127.0.0.1:{member.api_port}"
        config["restapi"].update(listen=api, connect_address=api)
        config["etcd3"]["hosts"] = f"127.0.0.1:{self.etcd_port}"
        postgresql = config["postgresql"]
        address = f"127.0.0.1:{member.pg_port}"
        postgresql.update(listen=address, connect_address=address, data_dir=str(member.data),
                          bin_dir=str(self.bin_dir), pgpass=str(member.home / "pgpass"))
        postgresql["authentication"]["superuser"]["password"] = PASSWORD
        postgresql["authentication"]["replication"]["password"] = PASSWORD
        postgresql["parameters"]["unix_socket_directories"] = str(member.home / "socket")
        config["log"] = {"level": "INFO"}
        return config

    def _spawn(self, member: Member) -> None:
        patroni = shutil.which("patroni")
        assert patroni is not None
        command = [patroni, str(member.config)]
        if self.os_user is not None:
            command = ["runuser", "-u", self.os_user, "--", *command]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PATRONI_", "PG"))}
        with member.log.open("ab") as out:
            member.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                              stdout=out, stderr=subprocess.STDOUT,
                                              start_new_session=True, cwd="/")
        member.frozen = False

    def _create_database(self, leader: Member) -> None:
        import psycopg

        with psycopg.connect(f"postgresql://postgres:{PASSWORD}@127.0.0.1:{leader.pg_port}/"
                             "postgres", autocommit=True, connect_timeout=5) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                  (self.database,)).fetchone()
            if exists is None:
                conn.execute(f'CREATE DATABASE "{self.database}"')

    def _start_haproxy(self) -> None:
        haproxy = haproxy_command()
        assert haproxy is not None
        env = {**os.environ, "PATRONI_LB_BIND": f"127.0.0.1:{self.haproxy_port}"}
        for index, member in enumerate(self.members, start=1):
            env[f"PATRONI_MEMBER_{index}"] = f"127.0.0.1:{member.pg_port}"
            env[f"PATRONI_MEMBER_{index}_API"] = str(member.api_port)
        with self.haproxy_log.open("ab") as out:
            self.haproxy_process = subprocess.Popen(
                [haproxy, "-db", "-f", str(HAPROXY_CONFIG)], env=env, cwd=self.home,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def _wait_checked(self, leader: str, deadline: float) -> None:
        """Until haproxy has found every standby down: it starts with every member up."""
        standbys = [f"leader/member{i} is DOWN" for i, m in enumerate(self.members, start=1)
                    if m.name != leader]
        while not all(line in self.haproxy_log.read_text(errors="replace")
                      for line in standbys):
            if (self.haproxy_process is not None and self.haproxy_process.poll() is not None
                    or time.monotonic() > deadline):
                raise PatroniError(f"haproxy did not check the members:\n"
                                   f"{log_tail(self.haproxy_log)}")
            time.sleep(0.2)

    def _wait_writable(self, deadline: float) -> None:
        """Until a write through haproxy commits."""
        import psycopg

        libpq = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.haproxy_port}/{self.database}"
        while True:
            try:
                with psycopg.connect(libpq, connect_timeout=2) as conn:
                    conn.execute("CREATE TEMP TABLE probe (x int)")
                return
            except psycopg.Error as exc:
                if (self.haproxy_process is not None and self.haproxy_process.poll() is not None
                        or time.monotonic() > deadline):
                    raise PatroniError(f"no write through haproxy: {exc}\n"
                                       f"{log_tail(self.haproxy_log)}") from exc
                time.sleep(0.2)

    def stop(self) -> None:
        """Every process stopped (Patroni stops its PostgreSQL), the directory removed."""
        for member in self.members:
            if member.frozen and member.process is not None:
                self._signal(member.process, signal.SIGCONT)
        for member in self.members:
            if member.alive():
                assert member.process is not None
                self._signal(member.process, signal.SIGTERM)
        for member in self.members:
            self._reap(member)
        for process in (self.haproxy_process, self.etcd_process):
            if process is not None and process.poll() is None:
                self._signal(process, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._signal(process, signal.SIGKILL)
                    process.wait()

    def _reap(self, member: Member) -> None:
        """Wait for a stopping member (Patroni shuts its PostgreSQL down); whatever is left
        after 30 s is killed."""
        deadline = time.monotonic() + 30
        if member.process is not None:
            try:
                member.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._signal(member.process, signal.SIGKILL)
                member.process.wait()
        while (pid := member.postmaster_pid()) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid is not None:
            self._kill_group(pid)

    def _leftovers(self) -> list[int]:
        """Processes still running from this cluster's directory (a PostgreSQL that a stopped
        Patroni was starting as it stopped)."""
        found = []
        marker = str(self.home).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if marker in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def kill(self) -> None:
        """SIGKILL every process of the cluster at once (nothing of it is kept)."""
        for member in self.members:
            postmaster = member.postmaster_pid()
            if member.process is not None and member.process.poll() is None:
                self._signal(member.process, signal.SIGKILL)
                member.process.wait()
            if postmaster is not None:
                self._kill_group(postmaster)
        for process in (self.haproxy_process, self.etcd_process):
            if process is not None and process.poll() is None:
                self._signal(process, signal.SIGKILL)
                process.wait()

    def remove(self, *, keep_logs: Path | None = None) -> None:
        """Kill every process, then delete the directory (a throw-away cluster needs no clean
        shutdown); with ``keep_logs``, etcd's, haproxy's and each member's Patroni and
        PostgreSQL logs are copied there first."""
        self.kill()
        if keep_logs is not None:
            keep_logs.mkdir(parents=True, exist_ok=True)
            for log in (self.etcd_log, self.haproxy_log, *(m.log for m in self.members)):
                with contextlib.suppress(OSError):
                    name = log.name if log.parent == self.home else f"{log.parent.name}-{log.name}"
                    shutil.copyfile(log, keep_logs / name)
        for pid in self._leftovers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.home, ignore_errors=True)
        if self.root.is_symlink():
            self.root.unlink()

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)

    @staticmethod
    def _kill_group(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

    # -- the cluster's state ----------------------------------------------------------------

    def cluster_state(self) -> dict[str, Any] | None:
        """Patroni's ``GET /cluster`` from the first member that answers."""
        for member in self.members:
            if not member.alive() or member.frozen:
                continue
            try:
                answer = httpx.get(member.api + "/cluster", timeout=1)
            except httpx.TransportError:
                continue
            if answer.status_code == 200:
                state: dict[str, Any] = answer.json()
                return state
        return None

    def leader(self) -> str | None:
        """The member that leads and runs, as ``/cluster`` says; ``None`` meanwhile."""
        state = self.cluster_state()
        if state is None:
            return None
        for member in state.get("members", []):
            if member.get("role") == "leader" and member.get("state") == "running":
                return str(member["name"])
        return None

    def wait_for_leader(self, *, other_than: str | None = None, deadline: float) -> str:
        while True:
            leader = self.leader()
            if leader is not None and leader != other_than:
                return leader
            dead = [m.name for m in self.members
                    if m.process is not None and not m.alive() and m is not self.down]
            if dead or time.monotonic() > deadline:
                tails = "\n".join(f"-- {m.name}:\n{log_tail(m.log, 15)}" for m in self.members)
                raise PatroniError(
                    (f"members exited: {dead}" if dead else
                     f"no leader other than {other_than!r} in time: {self.cluster_state()}")
                    + f"\n{tails}")
            time.sleep(0.2)

    def wait_for_replicas(self, count: int, *, deadline: float) -> None:
        """Until ``count`` standbys stream from the leader (one of them synchronously)."""
        while True:
            state = self.cluster_state() or {}
            members = state.get("members", [])
            streaming = [m for m in members if m.get("role") in ("replica", "sync_standby")
                         and m.get("state") in ("running", "streaming")]
            synchronous = [m for m in members if m.get("role") == "sync_standby"]
            if len(streaming) >= count and synchronous:
                return
            if time.monotonic() > deadline:
                raise PatroniError(f"{len(streaming)} of {count} standbys streaming: {state}")
            time.sleep(0.3)

    # -- faults that force a failover -------------------------------------------------------

    def _failed_over(self, kind: str, old: str, started: float, wall: float,
                     timeout: float, **details: Any) -> LeaderChange:
        new = self.wait_for_leader(other_than=old, deadline=started + timeout)
        change = LeaderChange(kind, old, new, wall, time.monotonic() - started, details)
        self.changes.append(change)
        return change

    def _current_leader(self) -> Member:
        if self.down is not None:
            raise PatroniError(f"{self.down.name} is still down: recover() it first")
        leader = self.leader()
        if leader is None:
            raise PatroniError(f"no leader: {self.cluster_state()}")
        return self.member(leader)

    def kill_leader(self, timeout: float = 60) -> LeaderChange:
        """SIGKILL the leader's whole member, as a crashed host: its Patroni (and the
        ``runuser`` around it) and its PostgreSQL (the postmaster's process group, every
        backend), so nothing restarts it in place and its leader key expires."""
        member = self._current_leader()
        postmaster = member.postmaster_pid()
        started, wall = time.monotonic(), time.time()
        assert member.process is not None
        self._signal(member.process, signal.SIGKILL)
        if postmaster is not None:
            self._kill_group(postmaster)
        member.process.wait()
        self.down = member
        return self._failed_over("kill_leader", member.name, started, wall, timeout)

    def isolate_leader(self, timeout: float = 60) -> LeaderChange:
        """Cut the leader's Patroni off from etcd: SIGSTOP freezes it, so it renews its leader
        key no more and the key expires, while its PostgreSQL still runs as a primary (as
        when a host's Patroni hangs or loses its network to etcd). haproxy's check of its
        ``/primary`` gets no answer and closes every connection to it; a standby is elected."""
        member = self._current_leader()
        started, wall = time.monotonic(), time.time()
        assert member.process is not None
        self._signal(member.process, signal.SIGSTOP)
        member.frozen = True
        self.down = member
        return self._failed_over("isolate_leader", member.name, started, wall, timeout)

    def switchover(self, timeout: float = 60) -> LeaderChange:
        """A planned change: ``POST /switchover`` to the leader's Patroni (as ``patronictl
        switchover`` does), which hands over to its synchronous standby."""
        member = self._current_leader()
        started, wall = time.monotonic(), time.time()
        answer = httpx.post(member.api + "/switchover", json={"leader": member.name},
                            timeout=timeout)
        if answer.status_code != 200:
            raise PatroniError(f"switchover refused: {answer.status_code} {answer.text}")
        return self._failed_over("switchover", member.name, started, wall, timeout,
                                 answer=answer.text.strip())

    def recover(self, timeout: float = 120) -> None:
        """The member the last fault took away comes back and rejoins as a standby (pg_rewind
        takes back whatever its old timeline has that the new leader has not); waits until
        every standby streams again. A killed member starts again. A frozen one is not
        resumed: its Patroni and its PostgreSQL are killed, then it starts again, as a
        watchdog resets a host whose Patroni hung. Resumed, Debian's Patroni 3.0.2 writes its
        leader key over the new leader's (its etcd session expired meanwhile; fixed upstream
        in 3.0.3), the new leader demotes itself, and whatever it committed meanwhile is
        rewound away (docs/operations.md)."""
        member, self.down = self.down, None
        if member is None:  # a switchover: its old leader rejoins by itself
            pass
        else:
            if member.frozen:
                assert member.process is not None
                postmaster = member.postmaster_pid()
                self._signal(member.process, signal.SIGKILL)
                if postmaster is not None:
                    self._kill_group(postmaster)
                member.process.wait()
            self._spawn(member)
        self.wait_for_replicas(len(self.members) - 1, deadline=time.monotonic() + timeout)

    def describe(self) -> str:
        """The members as ``/cluster`` lists them, one line (for logs)."""
        state = self.cluster_state() or {}
        return ", ".join(f"{m.get('name')} {m.get('role')} {m.get('state')} "
                         f"tl{m.get('timeline', '?')} lag {m.get('lag', 0)}"
                         for m in state.get("members", []))


def time_to_first_write(writes: list[tuple[float, float, bool]], fault_at: float,
                        window: float) -> float | None:
    """Seconds from ``fault_at`` to the first successful write once the failover is over: the
    first acknowledged write (``(sent, answered, ok)``, wall clock) sent no earlier than the
    last write that failed within ``window`` seconds of the fault (or than the fault, when
    none failed). A conservative figure: a frozen leader's PostgreSQL still takes writes
    until haproxy finds its Patroni silent, and those do not count. ``None``: none yet."""
    failed = [sent for sent, _, ok in writes if not ok and fault_at <= sent <= fault_at + window]
    since = max(failed, default=fault_at)
    answered = [done for sent, done, ok in writes if ok and sent >= since]
    return min(answered) - fault_at if answered else None
