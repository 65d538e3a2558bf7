"""Validated identifiers (docs/contract.md#tables-and-names): ``catalog.database.table`` names and
job ids, read as the server reads them (``metaservice_names``).

Validated on the client so that a bad name fails where it was written, before any Spark work,
with the same rules the server applies. A :class:`TableName` is plain and picklable, so it can
be shipped to executors.
"""

from __future__ import annotations

from metaservice_names import JOB_ID_PATTERN, TableName, dotted, validate_job_id

__all__ = ["JOB_ID_PATTERN", "TableName", "dotted", "validate_job_id"]
