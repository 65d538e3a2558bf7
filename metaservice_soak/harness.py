"""The soak's orchestration: the database, the servers, the Spark cluster and the pipeline's
roles, supervised, with the seeded faults; the end (ingestion stops, every job drains, the
final check); what it all measured.

    outcome = Soak(SoakConfig(minutes=30, seed=7, backend="postgresql")).run()

The state directory (``--state``, a temporary one by default) holds what the roles and the
harness write: ``events/ROLE.jsonl`` (the roles' events), ``faults.jsonl``, ``holds.jsonl``
(each strong-cut hold the monitor saw), ``monitor.jsonl`` (the monitor's 5xx),
``restarts.jsonl`` (each role exit and restart), ``control/``, ``final/``, ``warehouse/`` and
``logs/`` (every process's output, haproxy's request log among them).

Roles (``python -m metaservice_soak.roles ROLE ...``, the other half of the package) are
supervised: one that exits is started again with the same arguments after a pause, as a
user's scheduler would, except an ingest role that stopped after ``control/stop_ingest`` and
the stalled join, which only the faults start and stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from metaservice_soak import faults as fault_kinds
from metaservice_soak.faults import Fault, FaultLog, FaultRecord, ScheduleShape, schedule
from metaservice_soak.patroni import PatroniCluster
from metaservice_soak.postgres import PrivateCluster
from metaservice_soak.replicas import ServerPool

INGEST_ROLES = ("ingest_plugin", "ingest_engine")
JOB_ROLES = ("sibling_batch", "sibling_stream", "join")
READER_ROLES = ("reader_duckdb", "reader_pyiceberg", "reader_spark", "reader_head")
STALLED_JOIN = "stalled_join"
RESTART_PAUSE_SECONDS = 1.0
MONITOR_INTERVAL_SECONDS = 1.5
# how long a driver kill waits for a Spark job's driver while its own is being restarted
DRIVER_RESTART_WAIT = 30.0
# with --storage s3, the servers' timeouts to the store (METASERVICE_STORAGE_*_SECONDS): a
# request that finds it killed is answered 503 within their sum
STORE_CONNECT_SECONDS = 2.0
STORE_REQUEST_SECONDS = 10.0


@dataclass
class SoakConfig:
    minutes: float
    seed: int
    backend: str = "postgresql"  # or "sqlite"
    state: Path | None = None  # a temporary directory when None
    replicas: int = 2  # PostgreSQL only; SQLite has one server
    spark_workers: int = 2
    spark_worker_cores: int = 4  # advertised: each Spark role's application takes one
    spark_worker_memory: str = "3g"
    live_timeout: float = 600.0  # until every ingest and job role completed a first barrier
    drain_timeout: float = 300.0
    stop_timeout: float = 180.0
    keep: bool = False  # keep the state directory and the database afterwards
    kinds: tuple[str, ...] = ()  # default: every kind the backend has
    patroni: bool = False  # PostgreSQL on a Patroni cluster, with leader failovers
    storage: str = "local"  # or "s3": the warehouse in a bucket of a SeaweedFS of the run's

    def fault_kinds(self) -> tuple[str, ...]:
        if self.kinds:
            return self.kinds
        storage = fault_kinds.STORAGE_KINDS if self.storage == "s3" else ()
        if self.patroni:
            return (*fault_kinds.PATRONI_KINDS, *storage)
        if self.backend == "postgresql":
            return (*fault_kinds.KINDS, *storage)
        return (*(k for k in fault_kinds.KINDS if k != fault_kinds.DATABASE_CRASH), *storage)


# -- the roles ------------------------------------------------------------------------------

@dataclass
class Role:
    """One role's process, started again whenever it exits while ``supervised``."""

    name: str
    command: list[str]
    log: Path
    supervised: bool = True
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    finished: bool = False  # exited for good (ingestion stopped, or stopped by the harness)
    restart_at: float | None = None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def role_environment() -> dict[str, str]:
    """The roles' environment: the harness's, without what configures MetaService, pyiceberg or
    an AWS client. A role gets its server, token and catalog from its arguments, as a user's job
    gets them from its own configuration; a caller's ``PYICEBERG_CATALOG__LAKE__*`` (a test
    suite's, say) would otherwise make ``lake`` another catalog for the roles, and a caller's
    ``AWS_*`` keys or profile would let them reach the object store without the credentials the
    catalog vends (which the run on S3 is there to prove)."""
    return {key: value for key, value in os.environ.items()
            if not key.startswith(("METASERVICE_", "PYICEBERG_", "AWS_"))}


class Roles:
    """The pipeline's processes and their supervisor thread."""

    def __init__(self, state: Path, url: str, token: str, seed: int, spark_master: str | None,
                 python: str = sys.executable) -> None:
        self.state = state
        self.url = url
        self.token = token
        self.seed = seed
        self.spark_master = spark_master
        self.python = python
        self.roles: dict[str, Role] = {}
        self.restarts = state / "restarts.jsonl"
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name="supervisor", daemon=True)

    def command(self, name: str, index: int) -> list[str]:
        command = [self.python, "-m", "metaservice_soak.roles", name, "--url", self.url,
                   "--token", self.token, "--state", str(self.state),
                   "--seed", str(self.seed * 100 + index), "--python", self.python]
        if self.spark_master is not None:
            command += ["--spark-master", self.spark_master]
        return command

    def add(self, name: str, *, supervised: bool = True) -> Role:
        role = Role(name, self.command(name, len(self.roles)),
                    self.state / "logs" / f"{name}.log", supervised=supervised)
        self.roles[name] = role
        return role

    def start(self, name: str) -> None:
        with self._lock:
            role = self.roles[name]
            with role.log.open("ab") as out:
                role.process = subprocess.Popen(
                    role.command, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True, cwd=self.state,
                    env=role_environment())
            role.starts += 1
            role.finished = False
            role.restart_at = None
            self._record(name, "start", pid=role.process.pid, starts=role.starts)

    def start_supervising(self) -> None:
        self._thread.start()

    def _record(self, name: str, event: str, **fields: Any) -> None:
        line = json.dumps({"t": time.time(), "role": name, "event": event, **fields})
        with self.restarts.open("a") as out:
            out.write(line + "\n")

    def kill(self, name: str) -> int:
        """SIGKILL the role's process group (its Python process and, for a Spark role, the
        driver's JVM); the supervisor starts it again."""
        with self._lock:
            role = self.roles[name]
            assert role.process is not None
            pid = role.process.pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            role.process.wait()
            self._record(name, "killed", pid=pid)
            role.restart_at = time.monotonic() + RESTART_PAUSE_SECONDS
            return pid

    def terminate(self, name: str, timeout: float = 60.0) -> int | None:
        """SIGTERM the role (graceful), SIGKILL its group after ``timeout``; it is not started
        again. Returns its exit status."""
        with self._lock:
            role = self.roles[name]
            role.finished = True
            process = role.process
        if process is None:
            return None
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        # what the role left in its group (a Spark driver's JVM)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        self._record(name, "terminated", status=process.returncode)
        return process.returncode

    def _supervise(self) -> None:
        while not self._stopping.wait(0.5):
            with self._lock:
                for role in self.roles.values():
                    self._look_after(role)

    def _look_after(self, role: Role) -> None:
        if role.finished or role.process is None:
            return
        status = role.process.poll()
        if status is None:
            return
        if role.restart_at is None:
            self._record(role.name, "exited", status=status)
            if role.name in INGEST_ROLES and status == 0 and self.ingest_stopped():
                role.finished = True
                return
            if not role.supervised:
                role.finished = True
                return
            role.restart_at = time.monotonic() + RESTART_PAUSE_SECONDS
        if time.monotonic() >= role.restart_at:
            self.start(role.name)

    def ingest_stopped(self) -> bool:
        return (self.state / "control" / "stop_ingest").exists()

    def stop_all(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for name in list(self.roles):
            self.terminate(name, timeout=30)


# -- the monitor: holds, strong-cut lag, the harness's own view of 5xx ------------------------

@dataclass
class Hold:
    """A strong cut held by a catching-up table: ``holder_table``, written by ``job``."""

    holder_table: str
    job: str | None
    since_ms: int | None  # the server's word: when the holding job started
    first_seen: float
    last_seen: float
    tables: set[str] = field(default_factory=set)  # the tables whose strong cut it held

    def record(self) -> dict[str, Any]:
        return {"holder_table": self.holder_table, "job": self.job, "since_ms": self.since_ms,
                "first_seen": self.first_seen, "last_seen": self.last_seen,
                "tables": sorted(self.tables)}


class Monitor:
    """Polls ``/delay`` and each table's strong version every ``MONITOR_INTERVAL_SECONDS``:
    who holds a strong cut and since when (``held_back_by``), the greatest strong-cut lag
    (now − the cut's barrier), and any 5xx it got itself."""

    def __init__(self, state: Path, url: str, token: str) -> None:
        self.state = state
        self.url = url
        self.token = token
        self.holds: dict[tuple[str, str | None], Hold] = {}
        self.finished_holds: list[Hold] = []
        self.largest_strong_lag_ms: int | None = None
        self.largest_strong_lag_table: str | None = None
        self.strongest: dict[str, int] = {}  # each table's greatest strong barrier seen
        self.backwards: list[dict[str, Any]] = []  # a strong cut below one seen before
        self.polls = 0
        self.failed_polls = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=30)
        for hold in self.holds.values():
            self._finish(hold)
        self.holds.clear()

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30,
                          headers={"Authorization": f"Bearer {self.token}"}) as http:
            while not self._stopping.wait(MONITOR_INTERVAL_SECONDS):
                try:
                    self.poll(http)
                    self.polls += 1
                except (httpx.HTTPError, ValueError, KeyError):
                    self.failed_polls += 1

    def _get(self, http: httpx.Client, path: str) -> httpx.Response:
        answer = http.get(path)
        if answer.status_code >= 500:
            code = None
            with contextlib.suppress(ValueError, KeyError, TypeError):
                code = answer.json()["error"]["code"]
            line = json.dumps({"t": time.time(), "kind": "http_5xx", "method": "GET",
                               "path": path, "status": answer.status_code, "code": code})
            with (self.state / "monitor.jsonl").open("a") as out:
                out.write(line + "\n")
        return answer

    def poll(self, http: httpx.Client) -> None:
        answer = self._get(http, "/delay")
        if answer.status_code != 200:
            return
        now = time.time()
        seen: set[tuple[str, str | None]] = set()
        tables = answer.json()["tables"]
        for table in tables:
            for held in table.get("held_back_by") or []:
                key = (held["table"], held.get("writer_job"))
                seen.add(key)
                hold = self.holds.get(key)
                if hold is None:
                    hold = self.holds[key] = Hold(held["table"], held.get("writer_job"),
                                                  held.get("writer_started_at"), now, now)
                hold.last_seen = now
                hold.tables.add(table["table"])
        for key in [k for k in self.holds if k not in seen]:
            self._finish(self.holds.pop(key))
        now_ms = int(time.time() * 1000)
        for table in tables:
            name = table["table"]
            strong = self._get(http, "/version/strong/" + name.replace(".", "/"))
            if strong.status_code != 200:
                continue
            barrier = int(strong.json()["barrier"])
            if barrier < self.strongest.get(name, barrier):
                self.backwards.append({"t": time.time(), "table": name, "barrier": barrier,
                                       "after": self.strongest[name]})
            self.strongest[name] = max(barrier, self.strongest.get(name, barrier))
            lag = now_ms - barrier
            if self.largest_strong_lag_ms is None or lag > self.largest_strong_lag_ms:
                self.largest_strong_lag_ms, self.largest_strong_lag_table = lag, name

    def _finish(self, hold: Hold) -> None:
        self.finished_holds.append(hold)
        with (self.state / "holds.jsonl").open("a") as out:
            out.write(json.dumps(hold.record()) + "\n")


# -- the run --------------------------------------------------------------------------------

@dataclass
class SoakOutcome:
    """What a run leaves for the report."""

    config: SoakConfig
    state: Path
    started: float
    live: float | None = None  # every ingest and job role completed a first barrier
    ingest_stopped: float | None = None
    drained: float | None = None
    ended: float | None = None
    final: dict[str, Any] | None = None
    failure: str | None = None  # the harness itself could not finish the run
    largest_strong_lag_ms: int | None = None
    largest_strong_lag_table: str | None = None
    strong_backwards: list[dict[str, Any]] = field(default_factory=list)
    monitor_polls: int = 0
    role_starts: dict[str, int] = field(default_factory=dict)
    haproxy_log: Path | None = None
    machine: dict[str, str] = field(default_factory=dict)
    faults_planned: list[Fault] = field(default_factory=list)

    def save(self) -> None:
        """``outcome.json`` in the state directory: the report can be built again from it
        (``python -m metaservice_soak.report STATE``)."""
        fields = {k: v for k, v in vars(self).items() if k not in ("config", "state")}
        fields["config"] = {k: (str(v) if isinstance(v, Path) else v)
                            for k, v in vars(self.config).items()}
        fields["faults_planned"] = [vars(f) for f in self.faults_planned]
        fields["haproxy_log"] = str(self.haproxy_log) if self.haproxy_log else None
        (self.state / "outcome.json").write_text(json.dumps(fields, indent=2))

    @classmethod
    def load(cls, state: Path) -> SoakOutcome:
        fields = json.loads((state / "outcome.json").read_text())
        config = fields.pop("config")
        config["state"] = Path(config["state"]) if config.get("state") else None
        config["kinds"] = tuple(config.get("kinds") or ())
        outcome = cls(SoakConfig(**config), state, **{
            k: v for k, v in fields.items() if k not in ("faults_planned", "haproxy_log")})
        outcome.faults_planned = [Fault(**f) for f in fields["faults_planned"]]
        outcome.haproxy_log = Path(fields["haproxy_log"]) if fields["haproxy_log"] else None
        return outcome


class Soak:
    """One run (see the module docstring)."""

    def __init__(self, config: SoakConfig) -> None:
        if config.backend not in ("postgresql", "sqlite"):
            raise ValueError(f"unknown backend {config.backend!r}")
        self.config = config
        self.state = config.state or Path(tempfile.mkdtemp(prefix="metaservice-soak-"))
        if config.patroni and config.backend != "postgresql":
            raise ValueError("--patroni runs PostgreSQL")
        self.cluster: PrivateCluster | None = None
        self.patroni: PatroniCluster | None = None
        self.servers: ServerPool | None = None
        self.store: Any = None  # SeaweedFS, with --storage s3
        self.spark: Any = None
        self.roles: Roles | None = None
        self.monitor: Monitor | None = None
        self.fault_log = FaultLog(self.state / "faults.jsonl")
        self._log_lock = threading.Lock()
        self.driver_restart_wait = DRIVER_RESTART_WAIT

    def say(self, message: str) -> None:
        with self._log_lock:
            print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)

    # -- set-up -----------------------------------------------------------------------------

    def _database_url(self) -> str:
        if self.config.patroni:
            self.patroni = PatroniCluster(self.state / "patroni").start()
            self.say(f"patroni: leader {self.patroni.leader()}; {self.patroni.describe()}")
            return self.patroni.url
        if self.config.backend == "postgresql":
            self.cluster = PrivateCluster(self.state / "postgres").create()
            return self.cluster.url
        return f"sqlite:///{self.state / 'metaservice.db'}"

    def _start_spark(self) -> str:
        from metaservice_soak.spark_cluster import StandaloneCluster

        self.spark = StandaloneCluster(workers=self.config.spark_workers,
                                       cores=self.config.spark_worker_cores,
                                       memory=self.config.spark_worker_memory).start()
        return str(self.spark.master_url)

    @contextlib.contextmanager
    def _environment(self) -> Iterator[None]:
        local = ("events", "control", "final", "logs") + (
            ("warehouse",) if self.config.storage != "s3" else ())  # on S3: the bucket's
        for sub in local:
            (self.state / sub).mkdir(parents=True, exist_ok=True)
        try:
            url = self._database_url()
            self.say(f"database: {self.config.backend} ({url})")
            balancer = self.config.backend == "postgresql"
            warehouse, settings = self._warehouse()
            self.servers = ServerPool(url, warehouse, self.state / "logs",
                                      replicas=self.config.replicas if balancer else 1,
                                      balancer=balancer, settings=settings)
            token = self.servers.prepare()
            self.servers.start()
            self.say(f"servers: {self.servers.url} "
                     f"({len(self.servers.servers)} process(es){', haproxy' if balancer else ''})")
            master = self._start_spark()
            self.say(f"spark: {master}")
            self.roles = Roles(self.state, self.servers.url, token, self.config.seed, master)
            self.monitor = Monitor(self.state, self.servers.url, token)
            yield
        finally:
            self._tear_down()

    def _warehouse(self) -> tuple[Path | str, dict[str, str]]:
        """The servers' warehouse and the settings it needs: a directory of the state's, or
        (``storage`` s3) a bucket of a SeaweedFS started here serving STS, the servers holding
        its keys and vending each table's credentials, the roles given none."""
        if self.config.storage != "s3":
            return self.state / "warehouse", {}
        from metaservice_soak.seaweedfs import ROLE_ARN, SeaweedFS, sts_iam_config

        self.store = SeaweedFS(self.state / "s3", bucket="lake", iam_config=sts_iam_config())
        self.store.start()
        self.say(f"object store: SeaweedFS {self.store.endpoint}, bucket lake")
        return "s3://lake/warehouse", {
            **self.store.environment(), "METASERVICE_VENDED_CREDENTIALS_ROLE_ARN": ROLE_ARN,
            "METASERVICE_VENDED_CREDENTIALS_SECONDS": "3600",
            "METASERVICE_STORAGE_CONNECT_SECONDS": str(STORE_CONNECT_SECONDS),
            "METASERVICE_STORAGE_REQUEST_SECONDS": str(STORE_REQUEST_SECONDS)}

    def _tear_down(self) -> None:
        if self.roles is not None:
            self.roles.stop_all()
        if self.monitor is not None and self.monitor._thread.is_alive():
            self.monitor.stop()
        if self.spark is not None:
            with contextlib.suppress(Exception):
                self.spark.stop()
        if self.servers is not None:
            with contextlib.suppress(Exception):
                self.servers.stop()
        if self.store is not None:
            with contextlib.suppress(Exception):
                self.store.stop()
        if self.patroni is not None:
            with contextlib.suppress(Exception):
                self.patroni.remove(keep_logs=self.state / "logs" / "patroni")
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                if self.config.keep:
                    self.cluster.stop()
                else:
                    self.cluster.remove()

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> SoakOutcome:
        config = self.config
        seconds = config.minutes * 60
        outcome = SoakOutcome(config, self.state, started=time.time())
        with self._environment():
            assert self.roles is not None and self.monitor is not None
            assert self.servers is not None and self.servers.token is not None
            roles, servers, token = self.roles, self.servers, self.servers.token
            names = (*INGEST_ROLES, *JOB_ROLES, *READER_ROLES)
            for name in names:
                roles.add(name)
            roles.add(STALLED_JOIN, supervised=False)
            plan = schedule(config.seed, ScheduleShape.for_run(seconds),
                            kinds=config.fault_kinds(), replicas=len(servers.servers))
            outcome.faults_planned = plan
            self.say(f"{len(plan)} faults planned: "
                     + ", ".join(f"{f.kind}@{f.at:.0f}s" for f in plan))
            outcome.started = time.time()
            for name in names:
                roles.start(name)
            roles.start_supervising()
            self.monitor.start()
            try:
                self._wait_until_live(outcome)
                self._run_faults(plan, time.monotonic(), seconds)
                self._stop_ingestion(outcome)
                self._drain(outcome)
            except SoakError as exc:
                outcome.failure = str(exc)
                self.say(f"failed: {exc}")
            for name in (*JOB_ROLES, *READER_ROLES, STALLED_JOIN, *INGEST_ROLES):
                roles.terminate(name, timeout=60)
            self.monitor.stop()
            if outcome.failure is None:
                outcome.final = self._final_check(servers.url, token)
            outcome.ended = time.time()
            outcome.largest_strong_lag_ms = self.monitor.largest_strong_lag_ms
            outcome.largest_strong_lag_table = self.monitor.largest_strong_lag_table
            outcome.monitor_polls = self.monitor.polls
            outcome.strong_backwards = self.monitor.backwards
            outcome.role_starts = {name: role.starts for name, role in roles.roles.items()}
            outcome.haproxy_log = servers.balancer_log if servers.balancer else None
        outcome.save()
        return outcome

    def _wait_until_live(self, outcome: SoakOutcome) -> None:
        """Until every ingest role had an append acknowledged and every job committed once:
        the run's minutes (and its faults) count from there, however long Spark took to
        start."""
        from metaservice_soak.report import role_events

        wanted = {**{n: "acked" for n in INGEST_ROLES}, **{n: "commit" for n in JOB_ROLES}}
        deadline = time.monotonic() + self.config.live_timeout
        while True:
            events = role_events(self.state)
            waiting = [n for n, kind in wanted.items()
                       if not any(e.get("kind") == kind for e in events.get(n, []))]
            if not waiting:
                break
            if time.monotonic() > deadline:
                raise SoakError(f"the pipeline was not live within "
                                f"{self.config.live_timeout:.0f} s: no first barrier from "
                                f"{', '.join(waiting)}")
            time.sleep(1)
        outcome.live = time.time()
        self.say(f"pipeline live after {outcome.live - outcome.started:.0f} s")

    # -- faults -----------------------------------------------------------------------------

    def _run_faults(self, plan: list[Fault], started: float, seconds: float) -> None:
        """Each fault in a thread of its own at its time; returns when the run's time is up
        and every fault has ended."""
        pending = list(plan)
        threads: list[threading.Thread] = []
        while True:
            elapsed = time.monotonic() - started
            while pending and pending[0].at <= elapsed:
                fault = pending.pop(0)
                thread = threading.Thread(target=self._inject, args=(fault,),
                                          name=f"fault-{fault.kind}", daemon=True)
                thread.start()
                threads.append(thread)
            if elapsed >= seconds and not pending:
                break
            time.sleep(0.2)
        for thread in threads:
            thread.join(timeout=300)

    def _inject(self, fault: Fault) -> None:
        assert self.roles is not None and self.servers is not None
        t = time.time()
        detail: dict[str, Any] = {}
        target = fault.target
        self.say(f"fault: {fault.kind} {fault.target}")
        try:
            if fault.kind == fault_kinds.DRIVER_KILL:
                running = self._running_driver(fault.target)
                if running is None:
                    detail["skipped"] = "no Spark job's driver running (being restarted)"
                else:
                    if running != fault.target:
                        detail["planned"] = f"{fault.target} (being restarted)"
                        target = running
                    detail["pid"] = self.roles.kill(target)
            elif fault.kind == fault_kinds.SERVER_KILL:
                index = int(fault.target.rsplit("-", 1)[1]) - 1
                detail["pid"] = self.servers.kill(index)
                time.sleep(fault.down_seconds)
                self.servers.restart(index)
            elif fault.kind == fault_kinds.DATABASE_CRASH:
                assert self.cluster is not None
                self.cluster.crash()
                time.sleep(fault.down_seconds)
                self.cluster.start()
            elif fault.kind == fault_kinds.LEADER_FAILOVER:
                assert self.patroni is not None
                change = getattr(self.patroni, fault.target)()
                detail.update(change.record())
                self.say(f"failover ({fault.target}): {change.old} -> {change.new} after "
                         f"{change.elected_after:.1f} s")
                time.sleep(fault.down_seconds)
                self.patroni.recover()
                detail["rejoined"] = self.patroni.describe()
            elif fault.kind == fault_kinds.STORE_KILL:
                assert self.store is not None
                detail["pid"] = self.store.process.pid
                self.store.kill()
                time.sleep(fault.down_seconds)
                self.store.start()
            elif fault.kind == fault_kinds.STALLED_JOIN:
                if self.roles.roles[STALLED_JOIN].alive():
                    raise SoakError("the previous stalled join is still running")
                self.roles.start(STALLED_JOIN)
                time.sleep(fault.hold_seconds)
                detail["exit_status"] = self.roles.terminate(STALLED_JOIN, timeout=60)
        except Exception as exc:  # noqa: BLE001 - recorded: the report shows it
            detail["error"] = f"{type(exc).__name__}: {exc}"
            self.say(f"fault {fault.kind} failed: {detail['error']}")
        self.fault_log.write(FaultRecord(fault.kind, target, t, time.time(), fault.at, detail))

    def _running_driver(self, planned: str) -> str | None:
        """The Spark job whose driver a driver kill ends: the planned one, or, while that one is
        being restarted (it exited on its own, as a loaded machine can make it), the first other
        Spark job's that runs, waiting up to ``driver_restart_wait`` seconds for one; ``None`` when
        none does."""
        assert self.roles is not None
        candidates = (planned, *(r for r in fault_kinds.SPARK_JOB_ROLES if r != planned))
        deadline = time.monotonic() + self.driver_restart_wait
        while True:
            running = next((r for r in candidates if self.roles.roles[r].alive()), None)
            if running is not None or time.monotonic() >= deadline:
                return running
            time.sleep(0.5)

    # -- the end ----------------------------------------------------------------------------

    def _stop_ingestion(self, outcome: SoakOutcome) -> None:
        assert self.roles is not None
        (self.state / "control" / "stop_ingest").touch()
        outcome.ingest_stopped = time.time()
        self.say("ingestion stopping")
        deadline = time.monotonic() + self.config.stop_timeout
        while not all(self.roles.roles[n].finished for n in INGEST_ROLES):
            if time.monotonic() > deadline:
                raise SoakError(f"ingestion did not stop within {self.config.stop_timeout:.0f} s")
            time.sleep(0.5)
        missing = [n for n in INGEST_ROLES if not (self.state / "final" / f"{n}.json").exists()]
        if missing:
            raise SoakError(f"ingest roles exited without their final record: {missing}")

    def _drain(self, outcome: SoakOutcome) -> None:
        from metaservice_soak.checks import drained

        assert self.servers is not None and self.servers.token is not None
        deadline = time.monotonic() + self.config.drain_timeout
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if drained(self.servers.url, self.servers.token, str(self.state)):
                    break
            if time.monotonic() > deadline:
                raise SoakError(f"the jobs did not drain within {self.config.drain_timeout:.0f} s")
            time.sleep(2)
        outcome.drained = time.time()
        self.say(f"drained in {outcome.drained - (outcome.ingest_stopped or 0):.0f} s")

    def _final_check(self, url: str, token: str) -> dict[str, Any]:
        from metaservice_soak.checks import final_check

        result: dict[str, Any] = final_check(url, token, str(self.state))
        (self.state / "final_check.json").write_text(json.dumps(result, indent=2))
        return result


class SoakError(RuntimeError):
    """The run could not reach its end (ingestion did not stop, jobs did not drain)."""
