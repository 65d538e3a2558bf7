"""Logging set-up for the server: plain text (default) or one JSON object per line
(``METASERVICE_LOG_FORMAT=json``).

The code logs *events*: ``logger.info("barrier_committed", extra={"job": ..., "barrier": ...})``.
Both formats print the event name and its fields; JSON puts each field under its own key so a
log pipeline can index them. Fields whose name suggests a credential (token, authorization,
password, secret, …) are never printed: their value is replaced by ``"[redacted]"``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from typing import Any, Literal

LogFormat = Literal["text", "json"]

# The attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime",
                                                                          "taskName"}
# Extras that repeat the message for another consumer: uvicorn passes ``color_message``, the
# message with ANSI colours for its own console formatter.
_NOT_FIELDS = {"color_message"}
_SECRET = re.compile(r"token|authorization|password|passwd|secret|credential|api_?key", re.I)
REDACTED = "[redacted]"


def event_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra`` fields of a record, credentials redacted."""
    fields = {}
    for key, value in vars(record).items():
        if key in _STANDARD or key in _NOT_FIELDS or key.startswith("_"):
            continue
        fields[key] = REDACTED if _SECRET.search(key) else value
    return fields


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``event``, then the fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in event_fields(record).items():
            out.setdefault(key, _jsonable(value))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time level logger event key=value …``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = event_fields(record)
        if not fields:
            return line
        head, sep, tail = line.partition("\n")  # keep a traceback below the fields
        extras = " ".join(f"{k}={v}" for k, v in fields.items())
        return f"{head} {extras}{sep}{tail}"


def configure_logging(fmt: LogFormat = "text", level: str = "info") -> None:
    """Send every logger (ours, uvicorn's, SQLAlchemy's) through one handler on stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    logging.getLogger("alembic").setLevel(logging.WARNING)
    quiet_botocore()


def quiet_botocore() -> None:
    """botocore logs, at DEBUG, whole answers (STS's carry the secrets of the credentials it
    vends) and signed requests (with the server's session token): never below INFO."""
    logger = logging.getLogger("botocore")
    if logger.level < logging.INFO:
        logger.setLevel(logging.INFO)
