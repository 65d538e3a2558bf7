"""The warehouse's shared metadata files (a table at a read session's cut, a cut file): requests
racing to write the same file all succeed, and no reader ever sees part of it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from metaservice.catalog.storage.warehouse import Warehouse
from tests.metaservice.catalog.test_read_sessions import read_metadata_file

WRITERS = 8
FILES = 20


def _metadata(location: str) -> TableMetadata:
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    return new_table_metadata(schema=schema, partition_spec=UNPARTITIONED_PARTITION_SPEC,
                              sort_order=UNSORTED_SORT_ORDER, location=location,
                              properties={"padding": "x" * 200_000})


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_racing_writes_of_a_shared_file_all_succeed_and_are_read_whole(
        tmp_path: Path, scheme: str) -> None:
    root = f"{scheme}{tmp_path}/warehouse"
    metadata = _metadata(f"{root}/db/t")
    locations = [f"{root}/db/t/metadata/cut-{n}.metadata.json" for n in range(FILES)]
    start = threading.Barrier(WRITERS + 1)
    failures: list[BaseException] = []
    partial: list[str] = []
    done = threading.Event()

    content = metadata.model_dump_json().encode()

    def write() -> None:
        warehouse = Warehouse(root)  # one per thread: no cache shared between writers
        start.wait()
        try:
            for location in locations:
                warehouse.write_shared(content, location)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    def read() -> None:
        start.wait()
        while not done.is_set():
            for location in locations:
                try:
                    if read_metadata_file(location) != metadata:
                        partial.append(location)
                except FileNotFoundError:
                    pass  # not written yet
                except Exception:  # noqa: BLE001 - a part-written file does not parse
                    partial.append(location)

    writers = [threading.Thread(target=write) for _ in range(WRITERS)]
    reader = threading.Thread(target=read)
    for thread in (*writers, reader):
        thread.start()
    for writer in writers:
        writer.join()
    done.set()
    reader.join()
    assert not failures, failures
    assert not partial, partial
    assert all(read_metadata_file(location) == metadata for location in locations)
    directory = tmp_path / "warehouse" / "db" / "t" / "metadata"
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        f"cut-{n}.metadata.json" for n in range(FILES))  # no temporary file left


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_a_new_metadata_file_is_created_once_and_on_disk_before_the_write_returns(
        tmp_path: Path, scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit's metadata file (``Warehouse.write_new``): of writers racing for one name
    exactly one creates it and the others are refused, whole content only; the file and its
    directory entry are synced before the write returns (the commit naming it comes after)."""
    root = f"{scheme}{tmp_path}/warehouse"
    location = f"{root}/db/t/metadata/00001-a.metadata.json"
    contents = [bytes([65 + n]) * 300_000 for n in range(WRITERS)]
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    start = threading.Barrier(WRITERS)
    created: list[int] = []
    refused: list[int] = []

    def write(n: int) -> None:
        warehouse = Warehouse(root)
        start.wait()
        try:
            warehouse.write_new(location, contents[n])
            created.append(n)
        except FileExistsError:
            refused.append(n)

    writers = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    path = tmp_path / "warehouse" / "db" / "t" / "metadata" / "00001-a.metadata.json"
    assert len(created) == 1 and len(refused) == WRITERS - 1
    assert path.read_bytes() == contents[created[0]]
    assert str(path) in synced and str(path.parent) in synced
