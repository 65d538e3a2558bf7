"""Domain errors: every error the service reports, with its HTTP status and code
(docs/contract.md#errors).

Every error the service returns looks like::

    {"error": {"code": "table_has_writer", "message": "...", "details": {...}}}

Domain code raises a subclass of :class:`MetaServiceError`; ``metaservice/error_handlers.py``
renders them, and the framework's own errors, in that shape. This module is plain Python (no
web framework, no database driver), so services and pure modules raise these without depending
on HTTP.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar


class MetaServiceError(Exception):
    """Root of every error the service reports to a client."""

    status_code: ClassVar[int] = 400
    code: ClassVar[str] = "bad_request"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.headers: dict[str, str] | None = None

    def to_body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class InvalidRequestError(MetaServiceError):
    status_code = 422
    code = "invalid_request"


class UnknownJobError(MetaServiceError):
    status_code = 404
    code = "unknown_job"


class UnknownTableError(MetaServiceError):
    """A table the service has never heard of: no job registered it, no root report or
    commit recorded a barrier of it. Every route that takes a table answers it with this code,
    so a typo never reads as "not written yet"."""

    status_code = 404
    code = "unknown_table"

    # How alike a known name must be to be offered (difflib's ratio), and how many are offered.
    CLOSE_CUTOFF: ClassVar[float] = 0.8
    CLOSE_COUNT: ClassVar[int] = 3

    @classmethod
    def among(cls, unknown: Sequence[str], known: Iterable[str]) -> UnknownTableError:
        """The error for ``unknown``, naming the known tables whose names are close to each,
        with how alike they are (``details.close_matches``)."""
        names = sorted(dict.fromkeys(unknown))
        candidates = [k for k in dict.fromkeys(known) if k not in names]
        close = {n: [{"table": match, "similarity": round(similarity, 2)}
                     for similarity, match in cls._closest(n, candidates)]
                 for n in names}
        parts = []
        for n in names:
            hint = " or ".join(f"{m['table']} ({m['similarity']:.0%} alike)" for m in close[n])
            parts.append(f"{n} (did you mean {hint}?)" if hint else n)
        message = (f"unknown table {', '.join(parts)}: no job registered it and no barrier of "
                   "it was ever reported")
        details: dict[str, Any] = {"table": names[0]} if len(names) == 1 else {}
        details.update(tables=names, close_matches=close)
        return cls(message, **details)

    @classmethod
    def _closest(cls, name: str, candidates: list[str]) -> list[tuple[float, str]]:
        """The candidates alike enough, most alike first. Names of one namespace compare by
        their last part: ``lake.db.`` in common would make any two short names look alike."""
        namespace, _, table = name.rpartition(".")
        scored = []
        for candidate in candidates:
            other_namespace, _, other = candidate.rpartition(".")
            a, b = (table, other) if other_namespace == namespace else (name, candidate)
            similarity = difflib.SequenceMatcher(None, a, b).ratio()
            if similarity >= cls.CLOSE_CUTOFF:
                scored.append((similarity, candidate))
        return sorted(scored, key=lambda pair: (-pair[0], pair[1]))[:cls.CLOSE_COUNT]


class NoVersionError(MetaServiceError):
    status_code = 404
    code = "no_version"


class CatchingUpError(MetaServiceError):
    status_code = 404
    code = "catching_up"


class TableHasWriterError(MetaServiceError):
    status_code = 409
    code = "table_has_writer"


class CycleError(MetaServiceError):
    status_code = 409
    code = "cycle"


class BarrierRegressionError(MetaServiceError):
    status_code = 409
    code = "barrier_regression"


class UnknownBarrierError(MetaServiceError):
    status_code = 409
    code = "unknown_barrier"


class NotASinkError(MetaServiceError):
    status_code = 409
    code = "not_a_sink"


class JobNotRunningError(MetaServiceError):
    status_code = 409
    code = "job_not_running"


class JobNotPlannedError(MetaServiceError):
    status_code = 409
    code = "job_not_planned"


class BarrierNotCompleteError(MetaServiceError):
    status_code = 409
    code = "barrier_not_complete"


class BarrierNotExactError(MetaServiceError):
    """Some table completed the barrier's neighbourhood but is not exact at it
    (docs/contract.md#exactness, docs/contract.md#at-an-explicit-barrier): its snapshot there would
    mix two points of the source data."""

    status_code = 409
    code = "barrier_not_exact"


class SnapshotProtectedError(MetaServiceError):
    """A catalog commit would remove snapshots that MetaService protects
    (docs/contract.md#protected-snapshots, docs/contract.md#the-built-in-catalog)."""

    status_code = 409
    code = "snapshot_protected"


class BarrierInFutureError(MetaServiceError):
    """A barrier beyond the server's clock plus the configured bound (docs/contract.md#barriers)."""

    status_code = 422
    code = "barrier_in_future"


class SnapshotExpiredError(MetaServiceError):
    status_code = 410
    code = "snapshot_expired"

    @classmethod
    def approved(cls, expired: Sequence[Mapping[str, Any]]) -> SnapshotExpiredError:
        """The 410 naming the snapshots (``{"table", "snapshot_id"}``) approved for
        expiration."""
        first = expired[0]
        return cls(
            f"snapshot {first['snapshot_id']} of {first['table']} is approved for expiration"
            + (f" (and {len(expired) - 1} more)" if len(expired) > 1 else ""),
            snapshots=list(expired))


class UnknownSnapshotError(MetaServiceError):
    """A snapshot that completes no barrier of its table (never reported, or rolled back)."""

    status_code = 404
    code = "unknown_snapshot"


class UnknownLeaseError(MetaServiceError):
    status_code = 404
    code = "unknown_lease"


class LeaseExpiredError(MetaServiceError):
    """The lease ran out: it no longer protects anything and cannot be renewed."""

    status_code = 410
    code = "lease_expired"


class TooManyLeasesError(MetaServiceError):
    """The principal holds ``METASERVICE_MAX_LEASES`` live leases already."""

    status_code = 429
    code = "too_many_leases"


class LeaseTermTooLongError(MetaServiceError):
    """A lease asked for (or renewed) for longer than ``METASERVICE_MAX_LEASE_SECONDS``."""

    status_code = 422
    code = "lease_term_too_long"


class UnknownExpirationError(MetaServiceError):
    status_code = 404
    code = "unknown_expiration"


class SnapshotNotApprovedError(MetaServiceError):
    """An expiration reported as done a snapshot that was never approved for expiration."""

    status_code = 409
    code = "snapshot_not_approved"


class DatabaseUnavailableError(MetaServiceError):
    status_code = 503
    code = "database_unavailable"


class ConcurrentUpdateError(MetaServiceError):
    """A compare-and-swap lost a race it cannot resolve by itself; the client may retry."""

    status_code = 409
    code = "concurrent_update"


class RollbackInProgressError(MetaServiceError):
    """The table is fenced by an applied rollback plan until the plan is completed."""

    status_code = 409
    code = "rollback_in_progress"


class BarrierRolledBackError(MetaServiceError):
    """The barrier was invalidated by a rollback: the job discards its work and asks again."""

    status_code = 409
    code = "barrier_rolled_back"


class UnknownRollbackPlanError(MetaServiceError):
    status_code = 404
    code = "unknown_rollback_plan"


class RollbackPlanOutdatedError(MetaServiceError):
    """The topology or the targets changed since the plan was made: make a new plan."""

    status_code = 409
    code = "rollback_plan_outdated"


class RollbackPlanNotAppliedError(MetaServiceError):
    status_code = 409
    code = "rollback_plan_not_applied"


class HeldByCatalogError(MetaServiceError):
    """A report naming a snapshot of a table the built-in catalog holds that its commits did
    not record: the catalog records its tables' barriers itself
    (docs/contract.md#the-built-in-catalog)."""

    status_code = 409
    code = "held_by_catalog"


# -- authentication and authorisation (``auth/``) --------------------------------------------


class UnauthorizedError(MetaServiceError):
    status_code = 401
    code = "unauthorized"


class ForbiddenError(MetaServiceError):
    status_code = 403
    code = "forbidden"


class RateLimitedError(MetaServiceError):
    status_code = 429
    code = "rate_limited"


class TokenExistsError(MetaServiceError):
    status_code = 409
    code = "token_exists"


class LastAdminError(MetaServiceError):
    """Revoking the token would leave no active admin token."""

    status_code = 409
    code = "last_admin"


class UnknownTokenError(MetaServiceError):
    status_code = 404
    code = "unknown_token"
