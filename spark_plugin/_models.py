"""The service's answers as small immutable values (plain data, picklable).

Parsing is tolerant of fields the server adds later and strict about the ones the plugin relies
on: a missing required field raises :class:`~spark_plugin.TransportError` (an unusable answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from spark_plugin._errors import TransportError

Action = Literal["process", "wait", "abort", "none"]


def _require(data: Mapping[str, Any], key: str, what: str) -> Any:
    if not isinstance(data, Mapping) or key not in data:
        raise TransportError(f"unexpected answer for {what}: missing {key!r}")
    return data[key]


def _int_map(value: Any) -> dict[str, int]:
    return {str(k): int(v) for k, v in (value or {}).items()}


@dataclass(frozen=True)
class Commit:
    """A snapshot of a table recorded as completing a barrier (commit or root report)."""

    table: str
    barrier: int
    snapshot_id: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Commit:
        return cls(str(_require(data, "table", "a commit")),
                   int(_require(data, "barrier", "a commit")),
                   int(_require(data, "snapshot_id", "a commit")))


@dataclass(frozen=True)
class Position:
    """An answer of ``start`` or ``barriers/next`` (docs/contract.md#the-barrier-protocol).

    ``action`` is ``"process"`` (read ``snapshots``, the data between ``previous`` and them,
    commit ``barrier``), ``"wait"`` (ask again after ``retry_after_ms``), ``"abort"`` (the barrier
    held was invalidated: discard the work for it) or ``"none"`` (a job without sources).
    ``previous`` is ``None`` when the answer has no previous barrier (a full step: the job reads
    full snapshots and replaces its sinks' contents, docs/contract.md#start,
    docs/contract.md#the-spark-plugin).
    """

    action: Action
    barrier: int | None = None
    snapshots: dict[str, int] = field(default_factory=dict)
    previous: dict[str, int] | None = None
    retry_after_ms: int | None = None
    reason: str | None = None
    run: int | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Position:
        action = _require(data, "action", "a barrier position")
        if action not in ("process", "wait", "abort", "none"):
            raise TransportError(f"unexpected barrier action {action!r}")
        barrier = data.get("barrier")
        if action in ("process", "abort") and barrier is None:
            raise TransportError(f"a {action!r} answer without a barrier")
        return cls(
            action=action,
            barrier=None if barrier is None else int(barrier),
            snapshots=_int_map(data.get("snapshots")),
            previous=(None if data.get("previous") is None
                      else _int_map(data["previous"])),
            retry_after_ms=(None if data.get("retry_after_ms") is None
                            else int(data["retry_after_ms"])),
            reason=data.get("reason"),
            run=None if data.get("run") is None else int(data["run"]),
        )


@dataclass(frozen=True)
class JobRegistration:
    """The job as the server holds it after register/unregister."""

    job: str
    state: str
    run: int | None
    sources: tuple[str, ...]
    sinks: tuple[str, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobRegistration:
        return cls(str(_require(data, "job", "a job")), str(data.get("state", "")),
                   None if data.get("run") is None else int(data["run"]),
                   tuple(data.get("sources") or ()), tuple(data.get("sinks") or ()))


@dataclass(frozen=True)
class TableVersion:
    """The snapshot of one table answered by a version request."""

    table: str
    barrier: int
    snapshot_id: int


@dataclass(frozen=True)
class Versions:
    """An answer of ``POST /versions``: one version per requested table, maybe leased."""

    consistency: str
    versions: dict[str, TableVersion]
    lease_id: str | None = None
    expires_at: Any = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Versions:
        raw = _require(data, "versions", "versions")
        versions = {
            str(name): TableVersion(str(name), int(_require(v, "barrier", "a version")),
                                    int(_require(v, "snapshot_id", "a version")))
            for name, v in raw.items()
        }
        return cls(str(data.get("consistency", "")), versions, data.get("lease_id"),
                   data.get("expires_at"))


@dataclass(frozen=True)
class Lease:
    lease_id: str
    expires_at: Any = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Lease:
        return cls(str(_require(data, "lease_id", "a lease")), data.get("expires_at"))
