"""Whether Spark's Python workers can import the plugin, checked once per Spark application.

The ``metaservice`` data source runs in Spark's Python worker processes (the planner on the
driver host, readers and writers on executors). They run ``PYSPARK_PYTHON`` (or
``spark.pyspark.python``), not necessarily the driver's interpreter: one without the plugin
fails deep inside a query with a ``ModuleNotFoundError``. :func:`require_plugin_on_workers`
runs one tiny task that tries the import and raises :class:`~spark_plugin.WorkerImportError`
with the workers' interpreter and what the import raised there.

The probe is compiled from source rather than defined in this module, so that Spark's pickler
ships it by value: unpickling it on a worker must not itself need ``spark_plugin``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from spark_plugin._errors import WorkerImportError

logger = logging.getLogger(__name__)

_PROBE_SOURCE = '''
def probe(_rows):
    import sys
    try:
        import spark_plugin
    except BaseException as exc:
        yield ("error", type(exc).__name__ + ": " + str(exc), sys.executable)
    else:
        yield ("ok", getattr(spark_plugin, "__file__", "") or "", sys.executable)
'''

_checked: dict[str, str] = {}
_lock = threading.Lock()


def _probe() -> Any:
    namespace: dict[str, Any] = {"__name__": "metaservice_worker_probe"}
    exec(compile(_PROBE_SOURCE, "<metaservice worker probe>", "exec"), namespace)  # noqa: S102
    return namespace["probe"]


def require_plugin_on_workers(spark: Any) -> None:
    """Raise :class:`~spark_plugin.WorkerImportError` unless a Python worker of ``spark`` can
    import ``spark_plugin``; the answer is kept per Spark application, so this costs one tiny
    task per application.

    Raises:
        WorkerImportError: the import fails on the workers, or no worker could be started.
    """
    sc = spark.sparkContext
    key = f"{sc.applicationId}:{sc.pythonExec}"
    with _lock:
        if key in _checked:
            return
        try:
            [(status, detail, python)] = (sc.parallelize([0], 1).mapPartitions(_probe())
                                          .collect())
        except Exception as exc:  # noqa: BLE001 - any failure to run Python there is the answer
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise WorkerImportError(
                f"Spark's Python workers ({sc.pythonExec}) could not run a task importing "
                f"spark_plugin: {first}", python=str(sc.pythonExec), reason=first) from exc
        if status != "ok":
            raise WorkerImportError(
                f"Spark's Python workers run {python}, which cannot import spark_plugin "
                f"({detail}); install the plugin in that environment (pip install "
                "'metaservice[spark]'), or set PYSPARK_PYTHON / spark.pyspark.python to an "
                "interpreter that has it, before the SparkSession starts",
                python=python, reason=detail)
        _checked[key] = python
        logger.info("workers_import_plugin", extra={"python": python, "plugin": detail})
