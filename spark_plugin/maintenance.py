"""Safe snapshot expiration for Iceberg tables coordinated by MetaService
(docs/contract.md#two-phase-expiration, docs/contract.md#the-spark-plugin).

:func:`expire_snapshots` picks candidate snapshots in Iceberg (older than a cut-off, never the
newest ``retain_last``, never the current snapshot or a branch or tag head), asks MetaService
which of them may go, removes exactly the approved ones from the table's metadata and reports
them as expired. MetaService refuses what someone may still read (a table's latest snapshot,
the strong cut, what running jobs read, leased snapshots) and, from the approval on, never
hands out or leases an approved snapshot, so nothing can start reading one while it is deleted.

:func:`main` is the ``metaservice-maintenance`` command for operators and cron::

    metaservice-maintenance lake.db.orders lake.db.customers --older-than 6h --retain-last 10

It talks to ``$METASERVICE_URL`` (default ``http://127.0.0.1:8000``) and loads each table's
catalog by name through pyiceberg's configuration, e.g. for the catalog ``lake``::

    export PYICEBERG_CATALOG__LAKE__TYPE=sql PYICEBERG_CATALOG__LAKE__URI=sqlite:///$PWD/wh/catalog.db
    export PYICEBERG_CATALOG__LAKE__WAREHOUSE=file://$PWD/wh

(or the same under ``catalog: lake:`` in ``~/.pyiceberg.yaml``). A missing server or catalog is
one line on stderr and exit status 2, before any table is touched.

pyiceberg removes expired snapshots from the metadata (which keeps commits fast: commit cost
grows with the snapshots kept); data files no longer referenced are left for an orphan-file
clean-up.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from spark_plugin._client import DEFAULT_URL, MetaServiceClient, client_or_default
from spark_plugin._errors import MetaServiceError
from spark_plugin._iceberg import find_catalog, load_table
from spark_plugin._names import TableName

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

logger = logging.getLogger(__name__)

__all__ = ["ExpirationSummary", "expire_snapshots", "main", "select_candidates"]

COMMIT_RETRIES = 4


@dataclass(frozen=True)
class ExpirationSummary:
    """What one expiration run did to one table.

    Attributes:
        table: ``catalog.database.table``.
        expiration_id: the service's id of the run (``None`` when nothing was proposed or in a
            dry run).
        candidates: the snapshots proposed, oldest first.
        approved: the candidates MetaService approved (never handed out again).
        expired: the approved snapshots no longer in the table, reported as expired.
        refused: ``{snapshot_id: reason}`` for the candidates MetaService protects.
        retained: how many snapshots the table keeps.
        dry_run: nothing was approved or removed; ``approved`` are the candidates that nothing
            protected when the run looked (a later approval may still refuse some).
    """

    table: str
    expiration_id: str | None
    candidates: tuple[int, ...]
    approved: tuple[int, ...]
    expired: tuple[int, ...]
    refused: dict[int, str] = field(default_factory=dict)
    retained: int = 0
    dry_run: bool = False

    def describe(self) -> str:
        """One line for an operator."""
        reasons = Counter(r.split(":", 1)[0] for r in self.refused.values())
        refused = ", ".join(f"{k}: {n}" for k, n in sorted(reasons.items()))
        verb = "would expire" if self.dry_run else "expired"
        return (f"{self.table}: {len(self.candidates)} candidates, {len(self.approved)} approved, "
                f"{verb} {len(self.approved) if self.dry_run else len(self.expired)}, "
                f"{len(self.refused)} refused" + (f" ({refused})" if refused else "")
                + f"; {self.retained} snapshots retained")


def select_candidates(metadata: TableMetadata, *, cutoff_ms: int | None,
                      retain_last: int) -> list[int]:
    """The snapshots that may be proposed for expiration, oldest first: committed before
    ``cutoff_ms`` (any age when ``None``), not among the newest ``retain_last``, not the current
    snapshot, not the head of a branch or tag."""
    if retain_last < 1:
        raise ValueError("retain_last must be at least 1")
    heads = {ref.snapshot_id for ref in metadata.refs.values()}
    if metadata.current_snapshot_id is not None:
        heads.add(metadata.current_snapshot_id)
    ordered = sorted(metadata.snapshots,
                     key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
    keep = {s.snapshot_id for s in ordered[-retain_last:]}
    return [s.snapshot_id for s in ordered
            if s.snapshot_id not in keep and s.snapshot_id not in heads
            and (cutoff_ms is None or s.timestamp_ms < cutoff_ms)]


def _cutoff_ms(older_than: timedelta | datetime | None, now: datetime | None) -> int | None:
    if older_than is None:
        return None
    if isinstance(older_than, timedelta):
        if older_than < timedelta(0):
            raise ValueError("older_than must not be negative")
        moment = (now or datetime.now(UTC)) - older_than
    elif isinstance(older_than, datetime):
        moment = older_than
    else:
        raise TypeError("older_than must be a timedelta, a datetime or None")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _expire_by_ids(table: Table, snapshot_ids: Sequence[int]) -> None:
    """``table.maintenance.expire_snapshots().by_ids(ids).commit()``, in one metadata copy.

    pyiceberg 0.12's ``by_id`` deep-copies the whole table metadata twice per id (quadratic: a
    few seconds for a few hundred snapshots). The ids were checked by the caller (present, not
    the current snapshot, not a branch or tag head), so they are staged in one step when the
    builder has the attribute ``by_id`` fills; otherwise the public path is taken.
    """
    expire = table.maintenance.expire_snapshots()
    staged = getattr(expire, "_snapshot_ids_to_expire", None)
    if isinstance(staged, set):
        staged.update(snapshot_ids)
    else:  # pragma: no cover - another pyiceberg version
        expire = expire.by_ids(list(snapshot_ids))
    expire.commit()


def _remove_from_iceberg(table: Table, approved: Sequence[int]) -> Table:
    """Remove the approved snapshots still in the table; retried on commit conflicts (another
    writer committed meanwhile). Returns the table as last loaded."""
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(COMMIT_RETRIES + 1):
        metadata = table.metadata
        heads = {ref.snapshot_id for ref in metadata.refs.values()}
        present = [s for s in approved
                   if metadata.snapshot_by_id(s) is not None and s not in heads
                   and s != metadata.current_snapshot_id]
        if not present:
            return table
        try:
            _expire_by_ids(table, present)
            return table.refresh()
        except CommitFailedException:
            if attempt == COMMIT_RETRIES:
                raise
            logger.info("expiration_commit_retry", extra={"table": str(table.name()),
                                                           "attempt": attempt + 1})
            time.sleep(0.05 * (2 ** attempt))
            table = table.refresh()
    return table


def expire_snapshots(
    table: str | TableName,
    *,
    older_than: timedelta | datetime | None = None,
    retain_last: int = 1,
    client: MetaServiceClient | None = None,
    catalog: Any = None,
    approve_unknown: bool = False,
    dry_run: bool = False,
    now: datetime | None = None,
) -> ExpirationSummary:
    """Expire old snapshots of ``table`` that nothing protects.

    Args:
        table: ``catalog.database.table``.
        older_than: only snapshots committed before ``now - older_than`` (a ``timedelta``) or
            before a moment (a ``datetime``; naive means UTC); ``None``: any age.
        retain_last: the newest snapshots always kept (at least 1).
        client: the MetaService client (default: from ``$METASERVICE_URL``).
        catalog: a pyiceberg catalog, a :class:`~spark_plugin.CatalogSpec` or a mapping of
            names to either (default: found by the table's catalog name in Spark's
            configuration, then pyiceberg's, else MetaService's built-in catalog).
        approve_unknown: also expire snapshots that complete no barrier in MetaService (for
            example the intermediate snapshots of an overwrite); by default they are kept.
        dry_run: only report what would be proposed and what MetaService protects now.
        now: the current time (tests).

    Returns:
        An :class:`ExpirationSummary`.

    Raises:
        MetaServiceError: the service refused or could not be reached; nothing was removed.
        pyiceberg errors: the Iceberg commit failed after retries; the approved snapshots stay
            approved (never handed out) and a later run removes them.
    """
    name = TableName.parse(table)
    client = client_or_default(client)
    tbl = load_table(name, catalog, client=client)
    candidates = select_candidates(tbl.metadata, cutoff_ms=_cutoff_ms(older_than, now),
                                   retain_last=retain_last)
    if not candidates:
        return ExpirationSummary(str(name), None, (), (), (), {}, len(tbl.metadata.snapshots),
                                 dry_run)
    if dry_run:
        protected = client.protected_snapshots(name)
        refused = {s: protected[s][0] for s in candidates if s in protected}
        return ExpirationSummary(
            str(name), None, tuple(candidates),
            tuple(s for s in candidates if s not in refused), (), refused,
            len(tbl.metadata.snapshots), True)

    answer = client.request_expiration(name, candidates, approve_unknown=approve_unknown)
    expiration_id = str(answer["expiration_id"])
    approved = [int(s) for s in answer["approved"]]
    refused = {int(r["snapshot_id"]): str(r["reason"]) for r in answer["refused"]}
    logger.info("expiration_approved", extra={"table": str(name), "expiration_id": expiration_id,
                                               "approved": len(approved),
                                               "refused": len(refused)})
    try:
        tbl = _remove_from_iceberg(tbl, approved) if approved else tbl
    finally:
        # Report whatever is really gone, also when the Iceberg commit failed.
        current = tbl.refresh() if approved else tbl
        gone = [s for s in approved if current.metadata.snapshot_by_id(s) is None]
        client.complete_expiration(expiration_id, gone)
    logger.info("expiration_completed", extra={"table": str(name), "expiration_id": expiration_id,
                                                "expired": len(gone)})
    return ExpirationSummary(str(name), expiration_id, tuple(candidates), tuple(approved),
                             tuple(gone), refused, len(current.metadata.snapshots), False)


# -- the command ---------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> timedelta | datetime:
    """``90``, ``90s``, ``15m``, ``6h``, ``7d``, ``2w``, or an ISO 8601 moment."""
    match = _DURATION.match(text)
    if match:
        return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (90s, 15m, 6h, 7d) nor an ISO 8601 time") from None


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metaservice-maintenance",
        description="Expire old Iceberg snapshots that MetaService does not protect (no reader, "
                    "job, lease or consistent cut needs them).")
    parser.add_argument("tables", nargs="+", metavar="TABLE",
                        help="catalog.database.table (the catalog part names the pyiceberg "
                             "catalog unless --catalog is given)")
    parser.add_argument("--older-than", type=parse_age, default=None, metavar="AGE",
                        help="only snapshots older than AGE (90s, 15m, 6h, 7d) or committed "
                             "before an ISO 8601 time; default: any age")
    parser.add_argument("--retain-last", type=_positive, default=1, metavar="N",
                        help="always keep the newest N snapshots (default 1)")
    parser.add_argument("--url", default=os.environ.get("METASERVICE_URL") or DEFAULT_URL,
                        help=f"MetaService URL (default $METASERVICE_URL, else {DEFAULT_URL})")
    parser.add_argument("--token", default=None,
                        help="admin bearer token (default $METASERVICE_TOKEN; prefer the "
                             "variable: arguments are visible to other users)")
    parser.add_argument("--catalog", default=None, metavar="NAME",
                        help="pyiceberg catalog to load from its configuration "
                             "(~/.pyiceberg.yaml or PYICEBERG_CATALOG__NAME__*)")
    parser.add_argument("--approve-unknown", action="store_true",
                        help="also expire snapshots MetaService never recorded")
    parser.add_argument("--dry-run", action="store_true",
                        help="report what would be proposed and what is protected; change "
                             "nothing")
    parser.add_argument("--json", action="store_true", help="one JSON object per table")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return parser


def _summary_json(summary: ExpirationSummary) -> str:
    data = asdict(summary)
    data["refused"] = {str(k): v for k, v in summary.refused.items()}
    return json.dumps(data, sort_keys=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``metaservice-maintenance``: 0 when every table was handled, 1 when one failed (the
    others are still handled), 2 on a usage error."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        names = [TableName.parse(t) for t in args.tables]
    except ValueError as exc:
        print(f"metaservice-maintenance: {exc}", file=sys.stderr)
        return 2
    catalogs: dict[str, Any] = {}
    for catalog_name in dict.fromkeys(args.catalog or n.catalog for n in names):
        try:
            catalogs[catalog_name] = find_catalog(catalog_name, url=args.url,
                                                  token=args.token).load()
        except Exception as exc:  # noqa: BLE001 - pyiceberg raises ValueError, KeyError, ...
            prefix = f"PYICEBERG_CATALOG__{catalog_name.upper()}__"
            print(f"metaservice-maintenance: cannot load the pyiceberg catalog {catalog_name!r} "
                  f"({type(exc).__name__}: {exc}); configure it with {prefix}TYPE, {prefix}URI "
                  f"and {prefix}WAREHOUSE or in ~/.pyiceberg.yaml (or name another with "
                  "--catalog)", file=sys.stderr)
            return 2
    failed = False
    with MetaServiceClient(args.url, token=args.token, max_retries=0) as probe:
        try:
            probe.healthz()
        except MetaServiceError as exc:
            print(f"metaservice-maintenance: cannot reach MetaService at {args.url} ({exc}); "
                  "start `metaservice serve`, or pass --url or set METASERVICE_URL",
                  file=sys.stderr)
            return 2
    with MetaServiceClient(args.url, token=args.token) as client:
        for name in names:
            try:
                catalog: Mapping[str, Any] = {name.catalog: catalogs[args.catalog or name.catalog]}
                summary = expire_snapshots(
                    name, older_than=args.older_than, retain_last=args.retain_last,
                    client=client, catalog=catalog, approve_unknown=args.approve_unknown,
                    dry_run=args.dry_run)
            except Exception as exc:  # noqa: BLE001 - one line per table, then the next table
                failed = True
                print(f"metaservice-maintenance: {name}: {type(exc).__name__}: {exc}",
                      file=sys.stderr)
                continue
            print(_summary_json(summary) if args.json else summary.describe())
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
