"""Whether Spark's Python workers can import the plugin, checked once per Spark application.

The ``metaservice`` data source runs in Spark's Python worker processes (the planner on the
driver host, readers and writers on executors). They run the interpreter pyspark read from
``PYSPARK_PYTHON`` in the driver's environment when the SparkContext started (``python3`` on
each executor's ``PATH`` when unset), not necessarily the driver's: one without the plugin fails
deep inside a query with a ``ModuleNotFoundError``. ``spark.pyspark.python`` counts only when
``spark-submit`` starts the driver (it sets ``PYSPARK_PYTHON`` from it); set on
``SparkSession.builder``, or as ``spark.executorEnv.PYSPARK_PYTHON``, it changes nothing
(tested on a standalone cluster: the workers ran ``/usr/bin/python3``).
:func:`require_plugin_on_workers` runs one tiny task that tries the import and raises
:class:`~spark_plugin.WorkerImportError` with the workers' interpreter, what the import raised
there, and that remedy.

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


def remedy(sc: Any) -> str:
    """How to make ``sc``'s Python workers run another interpreter: what works, and why a
    ``spark.pyspark.python`` set on the session did not."""
    fix = ("set PYSPARK_PYTHON to an interpreter that has it (a path valid on every executor "
           "host) in the driver's environment before the SparkContext starts: export it, or "
           "os.environ['PYSPARK_PYTHON'] before SparkSession.builder...getOrCreate(); with "
           "spark-submit, --conf spark.pyspark.python=... does the same")
    try:
        configured = sc.getConf().get("spark.pyspark.python", None)
    except Exception:  # noqa: BLE001 - only a hint
        configured = None
    if configured and configured != sc.pythonExec:
        fix += (f" (spark.pyspark.python={configured} is in this session's configuration, but "
                "pyspark ignores it when the driver was not started by spark-submit; "
                f"its Python workers run {sc.pythonExec})")
    return fix


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
                f"spark_plugin: {first}; if that interpreter is the wrong one, {remedy(sc)}",
                python=str(sc.pythonExec), reason=first) from exc
        if status != "ok":
            raise WorkerImportError(
                f"Spark's Python workers run {python}, which cannot import spark_plugin "
                f"({detail}); install the plugin in that environment (pip install "
                f"'metaservice[spark]'), or {remedy(sc)}", python=python, reason=detail)
        _checked[key] = python
        logger.info("workers_import_plugin", extra={"python": python, "plugin": detail})
