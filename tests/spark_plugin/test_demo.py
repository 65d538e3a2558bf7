"""``metaservice-demo`` end to end, as a user runs it (the README's first command ends with
it) and stops it: Ctrl-C, or SIGTERM from a container runtime.

One run of the demo (Spark starts once) serves the tests of the module: it runs until it has
printed a few strong reads, at two cuts at least, then its process group gets SIGINT, as a
terminal sends it on Ctrl-C (the JVM and Spark's Python workers get it too). Its server lets a
token hold fewer live read sessions than the run has reports
(``METASERVICE_MAX_READ_SESSIONS``), so a report that left its read session open would have the
next ones refused.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from metaservice_demo.demo import ORDERS, clock

pytestmark = pytest.mark.spark

# the console script the README runs, installed next to this interpreter
DEMO_COMMAND = Path(sys.executable).with_name("metaservice-demo")
STRONG_READS = 3
READ_SESSIONS_CAP = STRONG_READS - 1  # the server's METASERVICE_MAX_READ_SESSIONS in the run
REFUSED = "HTTP 429"  # in DuckDB's error when the server refuses a connection (too many sessions)
STRONG_READ = re.compile(r"^\[\s*(\d+\.\d)s\] read\s+strong read session \(DuckDB, lake@strong\) "
                         r"at barrier \d")
CUT = re.compile(r" at barrier .*? \((\d+)\): ")  # a UTC time, then its integer
LOG = Path("metaservice-demo.log")  # in the temporary directory, where the demo puts it
HEAD_READ = re.compile(r"^\s+head \(DuckDB, lake\), read right after: invariant (held|broken)")


@dataclass
class DemoRun:
    returncode: int
    out: str
    err: str
    tmpdir: Path
    orders_barriers: list[int]  # the root's barriers as the server recorded them


def _demo_env(tmpdir: Path, settings: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYICEBERG_", "METASERVICE_"))}
    env["TMPDIR"] = str(tmpdir)  # where the demo's temporary directory goes
    return {**env, **settings}  # the demo's server takes its settings from its environment


class _Output:
    """The demo's stdout, collected line by line in a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.lines.append("")  # end of output
            self._changed.notify_all()

    def wait_for(self, predicate, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.lines):
                if self._thread.is_alive() is False or time.monotonic() > deadline:
                    return predicate(self.lines)
                self._changed.wait(timeout=1)
            return True

    def text(self) -> str:
        self._thread.join(timeout=30)
        return "\n".join(self.lines)


def _start(tmpdir: Path, stderr: Path, *args: str,
           settings: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], _Output]:
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [str(DEMO_COMMAND), "--port", "0", *args],
            env=_demo_env(tmpdir, settings or {}), stdout=subprocess.PIPE, stderr=err, text=True,
            start_new_session=True)  # its own process group, as under `timeout`
    return proc, _Output(proc)


def _kill_if_running(proc: subprocess.Popen[str]) -> None:
    """SIGKILL to the demo's process group (so that a failing test leaves nothing running)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _ctrl_c_once(proc: subprocess.Popen[str], output: _Output,
                 until: Callable[[list[str]], bool], timeout: float,
                 meanwhile: Callable[[], None] | None = None) -> None:
    """Once the demo's output satisfies ``until`` (or ``timeout`` seconds have passed), call
    ``meanwhile`` while it still runs, then Ctrl-C (SIGINT to its process group) and wait for
    its end; killed outright if the test fails on the way."""
    try:
        output.wait_for(until, timeout=timeout)
        if meanwhile is not None and proc.poll() is None:
            meanwhile()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        _kill_if_running(proc)


def _cuts(lines: list[str]) -> list[int]:
    """The barrier of each strong read printed."""
    return [int(m.group(1)) for x in lines if STRONG_READ.match(x) for m in [CUT.search(x)] if m]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    tmpdir = tmp_path_factory.mktemp("demo-tmp")
    stderr = tmp_path_factory.mktemp("demo-logs") / "stderr.txt"
    proc, output = _start(tmpdir, stderr, "--report-every", "3",
                          settings={"METASERVICE_MAX_READ_SESSIONS": str(READ_SESSIONS_CAP)})
    barriers: list[int] = []

    def ask_the_root_s_barriers() -> None:
        server = next((re.search(r"(http://127\.0\.0\.1:\d+)", x) for x in output.lines
                       if "] server " in x), None)
        if server is not None:
            answer = httpx.get(f"{server.group(1)}/tables/{ORDERS.replace('.', '/')}/barriers",
                               params={"limit": 1000}, timeout=30)
            barriers.extend(sorted(b["barrier"] for b in answer.json()["barriers"]))

    _ctrl_c_once(proc, output, lambda lines: (len(_cuts(lines)) >= STRONG_READS
                                              and len(set(_cuts(lines))) >= 2)
                 or any(REFUSED in x for x in lines), timeout=480,
                 meanwhile=ask_the_root_s_barriers)
    out = output.text()
    stderr.with_name("stdout.txt").write_text(out)  # kept with stderr, to look at after a run
    return DemoRun(proc.returncode, out, stderr.read_text(), tmpdir, barriers)


def test_ctrl_c_stops_queries_spark_and_server_and_removes_the_temporary_directory(demo):
    assert demo.returncode == 128 + signal.SIGINT, demo.out + demo.err[-3000:]
    assert "stopped by SIGINT" in demo.out
    assert "stopping the streaming queries and Spark" in demo.out
    # the demo's directory (warehouse, checkpoints, database, Spark's scratch space) is gone;
    # the log of Spark's and py4j's messages stays
    assert sorted(p.name for p in demo.tmpdir.iterdir()) == [LOG.name]


def test_a_stop_ends_on_the_summary_and_nothing_else(demo):
    """What Spark, its JVM and py4j print when a stop kills their tasks (py4j's 'KeyboardInterrupt
    while sending command.', Java's TaskKilledException traces) is in the log the summary names,
    not on the terminal: standard error is empty and the last line is the summary."""
    assert demo.err == "", demo.err[-3000:]
    last = demo.out.rstrip("\n").splitlines()[-1]
    log = demo.tmpdir / LOG.name
    summary = (r"\[\s*\d+\.\ds\] done     stopped by SIGINT: \d+ strong reads .*; \d+ barriers "
               rf"ingested \(Spark's and py4j's messages: {re.escape(str(log))}\)")
    assert re.fullmatch(summary, last), demo.out[-3000:]
    assert log.stat().st_size > 0  # the JVM's messages at least


def test_strong_read_sessions_hold_the_invariant_across_sibling_jobs_and_head_reads_break_it(demo):
    """DuckDB reads the catalog's consistent warehouse, attached anew for every report, and the head
    next to it."""
    out = demo.out
    assert "] invariant at one cut," in out and "customer_spend" in out
    for job, table in (("enrich-orders", "orders_enriched"), ("customer-spend", "customer_spend"),
                       ("revenue-by-segment", "revenue_by_segment")):
        assert f"{job} committed barrier" in out and table in out
    # each report releases the read session it opened: more reports than the token may hold
    # live sessions, and no connection refused
    assert not [x for x in out.splitlines() if REFUSED in x], out
    reads = [x for x in out.splitlines() if STRONG_READ.match(x)]
    assert len(reads) >= STRONG_READS > READ_SESSIONS_CAP, out
    assert all(": invariant held — " in x for x in reads), "\n".join(reads)
    # every report attaches the warehouse anew (a new read session): the cuts read move on
    cuts = _cuts(reads)
    assert len(cuts) == len(reads) and len(set(cuts)) >= 2 and cuts == sorted(cuts), cuts
    # one head read per strong read, printed right under it
    lines = out.splitlines()
    heads = [HEAD_READ.match(lines[i + 1]) for i, x in enumerate(lines) if STRONG_READ.match(x)]
    assert all(heads) and len(heads) == len(reads), out
    # both siblings have output at the cuts read: the invariant compared something
    spend = [int(m.group(1)) for x in reads
             for m in [re.search(r"customer_spend (\d+) orders of \d+ customers", x)] if m]
    assert spend and max(spend) > 0, "\n".join(reads)
    summary = re.search(r"(\d+) strong reads \(DuckDB, lake@strong\), invariant held in (\d+) "
                        r"of them; the head reads next to them \(DuckDB, lake\) broke it in "
                        r"(\d+)", out)
    assert summary is not None, out
    assert int(summary.group(1)) == int(summary.group(2)) >= STRONG_READS
    # the head, read outside a read session, is measurably wrong
    assert int(summary.group(3)) >= 1, out
    assert sum(m.group(1) == "broken" for m in heads) >= 1, out
    assert "Spark SQL reads the same read sessions with Apache Iceberg's Spark runtime" in out


def test_the_printed_paces_are_the_measured_ones(demo):
    out = demo.out.splitlines()
    # ingestion: the barriers counted and their mean interval are those the server recorded
    ingest = [re.search(r"ingest: (\d+) barriers (.+?) … (.+?), one every (\d+\.\d+) s", x)
              for x in out]
    ingest_reports = [m for m in ingest if m]
    assert ingest_reports, "\n".join(out)
    recorded = [clock(b) for b in demo.orders_barriers]
    checked = 0
    for m in ingest_reports:
        n, first, last, gap = int(m.group(1)), m.group(2), m.group(3), float(m.group(4))
        if last not in recorded:  # printed after the test read the server's record
            continue
        i, j = recorded.index(first), recorded.index(last)
        assert j - i + 1 == n
        measured = (demo.orders_barriers[j] - demo.orders_barriers[i]) / 1000 / (n - 1)
        assert abs(measured - gap) <= 0.006, (m.group(0), measured)
        checked += 1
    assert checked >= 1
    # strong reads: the time printed since the previous one is the time between the two reads'
    # stamps (each report is stamped when its read started)
    stamps: list[float] = []
    compared = 0
    for x in out:
        m = STRONG_READ.match(x)
        if m:
            stamps.append(float(m.group(1)))
        s = re.search(r"strong reads: (\d+\.\d) s since the previous one, this one took "
                      r"(\d+\.\d) s", x)
        if s:
            assert abs(float(s.group(1)) - (stamps[-1] - stamps[-2])) <= 0.15, (x, stamps)
            assert float(s.group(2)) > 0
            compared += 1
    assert compared == len(stamps) - 1 >= STRONG_READS - 1


def _java_children(pid: int) -> list[int]:
    """The processes ``pid`` started that run Java (pyspark's launcher execs the JVM)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in task.read_text().split():
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"java" in command:
                found.append(int(child))
    return found


def test_the_demo_takes_its_orders_from_kafka(kafka, tmp_path):
    """``--kafka``: each tick's orders are messages of a real broker's topic, read by a fourth
    streaming job with Spark's own Kafka source into ``orders`` (its barriers are that job's),
    and the strong reads hold the invariant as they do with the orders appended directly."""
    topic = "demo-orders"
    kafka.create_topic(topic, partitions=2)
    proc, output = _start(tmp_path, tmp_path / "stderr.txt", "--kafka", kafka.bootstrap,
                          "--kafka-topic", topic, "--report-every", "3")
    # until two strong reads (however long a loaded machine takes to align the five tables once
    # every job runs), then Ctrl-C
    _ctrl_c_once(proc, output, lambda lines: len(_cuts(lines)) >= 2, timeout=600)
    out = output.text()
    assert proc.returncode == 128 + signal.SIGINT, out[-3000:]
    assert f"Kafka {kafka.bootstrap} topic {topic} → ingest-orders" in out
    assert "ingest-orders committed barrier" in out
    # the lag table names the orders' writer: the job that reads Kafka
    assert re.search(r"lake\.shop\.orders +\S.* ingest-orders$", out, re.M), out[-3000:]
    reads = [x for x in out.splitlines() if STRONG_READ.match(x)]
    assert reads and all(": invariant held — " in x for x in reads), "\n".join(reads)
    orders = [int(m.group(1)) for x in reads for m in [re.search(r" orders (\d+) ", x)] if m]
    assert orders and max(orders) > 0, "\n".join(reads)


def test_sigterm_while_spark_starts_removes_the_temporary_directory(tmp_path):
    """A container runtime signals the demo's process alone, here while the JVM starts."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc, output = _start(tmpdir, tmp_path / "stderr.txt")
    jvms: list[int] = []
    try:
        assert output.wait_for(lambda lines: any("] spark    starting" in x for x in lines),
                               timeout=120), output.text()
        deadline = time.monotonic() + 120
        while not _java_children(proc.pid):  # the JVM is starting
            assert time.monotonic() < deadline and proc.poll() is None, output.text()
            time.sleep(0.05)
        jvms = _java_children(proc.pid)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        _kill_if_running(proc)
        left = [j for j in jvms if Path(f"/proc/{j}").exists()]
        for jvm in left:  # (so that a failing run leaves none running)
            os.kill(jvm, signal.SIGKILL)
    assert not left, f"the demo's stop left its starting JVM running: {left}"
    out = output.text()
    assert proc.returncode == 128 + signal.SIGTERM, out + (tmp_path / "stderr.txt").read_text()
    assert "stopped by SIGTERM" in out
    assert sorted(p.name for p in tmpdir.iterdir()) == [LOG.name]


def test_a_failure_a_stop_signal_caused_while_spark_starts_is_that_stop(tmp_path, monkeypatch):
    """A library may catch the signal's exception and raise its own (py4j cleaning up a socket
    the JVM never answered on): the demo still stops as the signal asked, 128 + SIGTERM, and
    removes its directory."""
    import tempfile

    from metaservice_demo import demo as demo_module

    def start_spark_interrupted(local_dir: Path, jars: list[Path] | None = None) -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except KeyboardInterrupt:
            raise OSError(107, "Transport endpoint is not connected") from None
        raise AssertionError("the demo's SIGTERM handler did not run")

    monkeypatch.setattr(demo_module, "start_spark", start_spark_interrupted)
    # The demo ends the JVM pyspark launched in its process: in this one, that is the tests'
    # shared session's. Nothing was launched here; the cleanup is recorded, not run.
    jvm_ends: list[bool] = []
    monkeypatch.setattr(demo_module, "_end_jvm", lambda: jvm_ends.append(True))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # the demo quiets logging for its own process; this one's levels are put back
    levels = {name: logging.getLogger(name).level
              for name in (None, "httpx", "py4j", "spark_plugin", "metaservice", "uvicorn")}
    for name in ("METASERVICE_URL", "METASERVICE_SPARK_STATE_DIR"):
        monkeypatch.setenv(name, "")  # restored after the test; the demo sets them
        monkeypatch.delenv(name)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert demo_module.main(["--port", "0"]) == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOG.name]
    assert jvm_ends == [True]  # the stop ran the demo's whole cleanup
