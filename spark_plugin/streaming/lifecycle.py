"""When a streaming query's jobs are registered, started and unregistered
(docs/contract.md#the-spark-plugin).

- **Plan time**: ``readStream...load()`` registers the source (Spark calls the data source's
  ``schema()`` then); the sink registers when Spark plans the query's first micro-batch (the
  earliest moment Spark instantiates a sink), which is why a new job's first micro-batch is an
  empty registration batch (``source.py``).
- **Start**: at the query's first offset request once the job has its sink (``source.py``).
- **Stop**: :class:`StreamingJobsListener`, a ``StreamingQueryListener`` installed by
  ``register_data_source``, unregisters the query's jobs when the query terminates (stopped,
  failed or finished with ``Trigger.AvailableNow``). A driver that is killed never says so: its
  jobs stay running, and a restart from the checkpoint resumes them.

The data source runs in Spark's Python worker processes, the listener in the driver's Python
process. They meet in a small state directory on the driver host
(``$METASERVICE_SPARK_STATE_DIR``, default ``<tmp>/metaservice-spark-<uid>``): the data source
writes which server each job talks to, and the sink which jobs each query (by its id, read from
the checkpoint) runs. The listener also learns the jobs of a query from the offsets of its
progress events. Tokens are never written there: the listener uses the token it was given (or
``$METASERVICE_TOKEN``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

STATE_DIR_ENV = "METASERVICE_SPARK_STATE_DIR"


def state_dir() -> Path:
    configured = os.environ.get(STATE_DIR_ENV)
    if configured:
        return Path(configured)
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"metaservice-spark-{uid}"


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def remember_job(job: str, url: str) -> None:
    """Record which server ``job`` talks to (best effort)."""
    try:
        path = state_dir() / "jobs" / f"{job}.json"
        if (_read_json(path) or {}).get("url") != url:
            _write_json(path, {"url": url})
    except OSError:
        logger.debug("state_dir_unwritable", exc_info=True)


def remember_query(query_id: str | None, jobs: Iterable[str], url: str) -> None:
    """Record that streaming query ``query_id`` runs ``jobs`` (best effort)."""
    if not query_id:
        return
    try:
        path = state_dir() / "queries" / f"{query_id}.json"
        known = set((_read_json(path) or {}).get("jobs", []))
        wanted = known | set(jobs)
        if wanted != known:
            _write_json(path, {"jobs": sorted(wanted)})
        for job in jobs:
            remember_job(job, url)
    except OSError:
        logger.debug("state_dir_unwritable", exc_info=True)


def jobs_of_query(query_id: str) -> set[str]:
    return set((_read_json(state_dir() / "queries" / f"{query_id}.json") or {}).get("jobs", []))


def forget_query(query_id: str) -> None:
    with contextlib.suppress(OSError):
        (state_dir() / "queries" / f"{query_id}.json").unlink(missing_ok=True)


def url_of_job(job: str) -> str | None:
    return (_read_json(state_dir() / "jobs" / f"{job}.json") or {}).get("url")


def jobs_in_progress(progress: Any) -> set[str]:
    """Job ids named by the ``metaservice`` offsets of a query progress."""
    from spark_plugin.streaming.offsets import BarrierOffset

    jobs = set()
    for source in getattr(progress, "sources", None) or []:
        for raw in (getattr(source, "endOffset", None), getattr(source, "startOffset", None)):
            data: Any = raw
            if isinstance(raw, str):
                try:
                    data = json.loads(raw)
                except ValueError:
                    continue
            if isinstance(data, dict) and BarrierOffset.is_offset(data):
                jobs.add(str(data["job"]))
    return jobs


def _listener_base() -> type:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    return StreamingQueryListener


# pyspark's listener class is imported when the class is defined, not when this module is
# checked: mypy cannot see a base class returned by a function.
class StreamingJobsListener(_listener_base()):  # type: ignore[misc]
    """Unregisters the jobs of a streaming query when it terminates."""

    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        super().__init__()
        self.url = url
        self.token = token
        self._jobs: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self.unregistered: list[str] = []

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        try:
            jobs = jobs_in_progress(event.progress)
            if jobs:
                with self._lock:
                    self._jobs.setdefault(str(event.progress.id), set()).update(jobs)
        except Exception:  # noqa: BLE001 - a listener must never break the query
            logger.warning("listener_progress_failed", exc_info=True)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        query = str(event.id)
        with self._lock:
            jobs = self._jobs.pop(query, set())
        try:
            jobs |= jobs_of_query(query)
        except Exception:  # noqa: BLE001
            logger.warning("listener_state_unreadable", exc_info=True)
        for job in sorted(jobs):
            self._unregister(job, query)
        forget_query(query)

    def _unregister(self, job: str, query: str) -> None:
        from spark_plugin._client import MetaServiceClient

        url = url_of_job(job) or self.url or os.environ.get("METASERVICE_URL")
        if not url:
            logger.warning("stream_job_not_unregistered", extra={"job": job, "query": query,
                                                                 "reason": "no server URL"})
            return
        try:
            with MetaServiceClient(url, token=self.token) as client:
                client.unregister(job)
            self.unregistered.append(job)
            logger.info("stream_job_unregistered", extra={"job": job, "query": query})
        except Exception:  # noqa: BLE001
            logger.warning("stream_job_not_unregistered", extra={"job": job, "query": query},
                           exc_info=True)


_installed: dict[int, StreamingJobsListener] = {}
_install_lock = threading.Lock()


def install_listener(spark: Any, url: str | None = None,
                     token: str | None = None) -> StreamingJobsListener:
    """Add the listener to ``spark`` once (per session)."""
    key = id(spark)
    with _install_lock:
        listener = _installed.get(key)
        if listener is None:
            listener = _installed[key] = StreamingJobsListener(url, token)
            spark.streams.addListener(listener)
        else:
            listener.url = url or listener.url
            listener.token = token or listener.token
        return listener
