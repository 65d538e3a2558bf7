"""A commit staged for the rules (``StagedCommit``: the metadata before and after, the file
written), and what it changes, as far as MetaService's rules care (pure code over table
metadata).

A commit's effect is read from the metadata before and after pyiceberg applied its updates, not
from the updates themselves, so every way of reaching a state (an ``add-snapshot`` and a
``set-snapshot-ref``, a fast-forward of ``main`` to a staged snapshot, several snapshots in one
commit as in an overwrite) is judged by what it leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH

from metaservice.names import TableName

JOB_PROPERTY = "metaservice.job"
BARRIER_PROPERTY = "metaservice.barrier"
REPLACE = "replace"


@dataclass
class StagedCommit:
    name: TableName
    base: TableMetadata | None
    base_version: int | None
    metadata: TableMetadata
    metadata_location: str
    changed: bool
    # The locations the table claims after the commit, when it creates the table or claims
    # one it did not (set-location, a write.*.path property); None otherwise.
    claims: list[str] | None = None
    # Cut files of the snapshots the commit removed: deleted once it committed.
    removed_cut_files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class NewHead:
    """``main`` now points at a snapshot it never pointed at before (or an ancestor of)."""

    snapshot_id: int
    operation: str | None
    job: str | None
    barrier: str | None  # as written in the summary; validated by the service
    parent_id: int | None


@dataclass(frozen=True)
class CommitChanges:
    old_main: int | None = None
    new_main: int | None = None
    new_head: NewHead | None = None
    moved_back_to: int | None = None  # main moved back to an ancestor (a rollback)
    # main moved to a snapshot that does not descend from where it was (and is no ancestor of
    # it), or was removed: only an applied rollback plan allows the first, nothing the second.
    not_forward: bool = False
    main_removed: bool = False
    removed_snapshots: list[int] = field(default_factory=list)
    # Snapshots the commit added that main's new history does not hold (a side branch).
    side_snapshots: list[int] = field(default_factory=list)

    @property
    def matters(self) -> bool:
        return (self.new_head is not None or self.moved_back_to is not None
                or self.not_forward or self.main_removed or bool(self.removed_snapshots))

    @property
    def compaction(self) -> bool:
        """The new head rewrites the old head's files (operation ``replace``, its parent the old
        head): it takes over the old head's barriers
        (docs/contract.md#commits-through-the-catalog)."""
        head = self.new_head
        return (head is not None and head.operation == REPLACE and self.old_main is not None
                and head.parent_id == self.old_main)


def _main(metadata: TableMetadata | None) -> int | None:
    if metadata is None:
        return None
    ref = metadata.refs.get(MAIN_BRANCH)
    return ref.snapshot_id if ref is not None else None


def ancestors(metadata: TableMetadata, snapshot_id: int | None) -> set[int]:
    """``snapshot_id`` and every ancestor of it that the metadata still holds."""
    found: set[int] = set()
    while snapshot_id is not None and snapshot_id not in found:
        snapshot = metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            break
        found.add(snapshot_id)
        snapshot_id = snapshot.parent_snapshot_id
    return found


def commit_changes(base: TableMetadata | None, new: TableMetadata) -> CommitChanges:
    """Compare the metadata before (``None`` for a table created by this commit) and after."""
    old_main, new_main = _main(base), _main(new)
    before = {s.snapshot_id for s in base.snapshots} if base is not None else set()
    after = {s.snapshot_id for s in new.snapshots}
    removed = sorted(before - after)
    new_history = ancestors(new, new_main)
    side = sorted((after - before) - new_history)
    new_head: NewHead | None = None
    moved_back_to: int | None = None
    not_forward = False
    if new_main is not None and new_main != old_main:
        if base is not None and new_main in ancestors(base, old_main):
            moved_back_to = new_main
        else:
            not_forward = old_main is not None and old_main not in new_history
            snapshot = new.snapshot_by_id(new_main)
            assert snapshot is not None  # pyiceberg refuses a ref to an unknown snapshot
            summary = snapshot.summary
            extra = summary.additional_properties if summary is not None else {}
            new_head = NewHead(
                snapshot_id=new_main,
                operation=summary.operation.value if summary is not None else None,
                job=extra.get(JOB_PROPERTY),
                barrier=extra.get(BARRIER_PROPERTY),
                parent_id=snapshot.parent_snapshot_id,
            )
    return CommitChanges(old_main=old_main, new_main=new_main, new_head=new_head,
                         moved_back_to=moved_back_to, not_forward=not_forward,
                         main_removed=old_main is not None and new_main is None,
                         removed_snapshots=removed, side_snapshots=side)
