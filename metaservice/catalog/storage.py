"""Metadata files in the warehouse, through pyiceberg's FileIO (local paths, ``s3://``, …).

A metadata file is written once and never changed, so files read are cached by location. A
file is written before the transaction that points at it commits: a crash in between leaves an
unreferenced file, never a pointer without its file.

A view's cut of a table (SPEC §12) is a file too, named after what decides its content and
shared by every read session serving that cut: written by whichever request needs it first,
possibly by several at once (``write_shared``), never named by a table's pointer. It is
deleted (``delete_cut_files``) after the commit that expires its snapshot, or the drop that
purges its table, committed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from typing import Generic, TypeVar
from urllib.parse import urlparse

from pyiceberg.catalog import delete_data_files, delete_files
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.manifest import ManifestFile
from pyiceberg.serializers import FromInputFile, ToOutputFile
from pyiceberg.table.locations import SimpleLocationProvider
from pyiceberg.table.metadata import TableMetadata

from metaservice.catalog import views

logger = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

_CACHE_SIZE = 256


def _has_scheme(location: str) -> bool:
    return "://" in location


def _local_path(location: str) -> str | None:
    """The path of a location on the local file system, None for an object store's."""
    if not _has_scheme(location):
        return location
    parsed = urlparse(location)
    return parsed.path if parsed.scheme == "file" and parsed.netloc in ("", "localhost") else None


def _sync(path: str) -> None:
    """fsync a file or a directory (its entries)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class _Recent(Generic[K, V]):
    """The last ``_CACHE_SIZE`` values by key, safe across threads."""

    def __init__(self) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > _CACHE_SIZE:
                self._items.popitem(last=False)


class Warehouse:
    """Where the catalog's tables live (``METASERVICE_WAREHOUSE``)."""

    def __init__(self, root: str) -> None:
        if not _has_scheme(root):
            root = os.path.abspath(root)
        self.root = root.rstrip("/")
        self._files: _Recent[str, TableMetadata] = _Recent()
        self._cut_locations: _Recent[tuple[str, int, int, str], str] = _Recent()

    def io(self, location: str) -> FileIO:
        return load_file_io({}, location)

    def default_table_location(self, namespace: str, table: str) -> str:
        return f"{self.root}/{namespace}/{table}"

    def new_metadata_location(self, metadata: TableMetadata, version: int) -> str:
        # Metadata files go where every pyiceberg provider puts them (write.metadata.path, else
        # <location>/metadata). Not through load_location_provider: it would import and call,
        # here in the server, the class a table property names (write.py-location-provider.impl),
        # and fail on other properties that only concern data files.
        provider = SimpleLocationProvider(metadata.location.rstrip("/"), metadata.properties)
        return provider.new_table_metadata_file_location(version)

    def write(self, metadata: TableMetadata, location: str) -> None:
        """Write a new metadata file (never overwrites one)."""
        if not _has_scheme(location):
            os.makedirs(os.path.dirname(location), exist_ok=True)
        ToOutputFile.table_metadata(metadata, self.io(location).new_output(location))
        self._files.put(location, metadata)

    def write_shared(self, metadata: TableMetadata, location: str) -> None:
        """Write a metadata file whose name stands for its content, unless it is there already.

        Requests serving the same content may race to write it: each succeeds and no reader
        ever sees part of the file. A local file is written under a temporary name and linked
        into place (a link never replaces a file; pyarrow's ``create`` would truncate one
        written meanwhile); an object store's object appears whole when its upload completes,
        and a racing upload of it stores the same bytes again. Not cached: the catalog serves
        such a file's metadata from the file it derives from, never reads it back.
        """
        io = self.io(location)
        if not io.new_input(location).exists():
            path = _local_path(location)
            if path is None:
                # FileExistsError: written meanwhile by another request, the same content.
                with contextlib.suppress(FileExistsError):
                    ToOutputFile.table_metadata(metadata, io.new_output(location))
            else:
                directory = os.path.dirname(path)
                os.makedirs(directory, exist_ok=True)
                handle, temporary = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=directory)
                os.close(handle)
                try:
                    ToOutputFile.table_metadata(metadata, io.new_output(temporary),
                                                overwrite=True)
                    _sync(temporary)  # on disk before its name is: a crash leaves no empty file
                    # FileExistsError: linked meanwhile by another request, the same content.
                    with contextlib.suppress(FileExistsError):
                        os.link(temporary, path)
                    _sync(directory)
                finally:
                    os.unlink(temporary)

    def read(self, location: str) -> TableMetadata:
        cached = self._files.get(location)
        if cached is not None:
            return cached
        metadata = FromInputFile.table_metadata(self.io(location).new_input(location))
        self._files.put(location, metadata)
        return metadata

    def cut_location(self, head_location: str, snapshot_id: int, barrier: int, kind: str,
                     served: TableMetadata) -> str:
        """``views.cut_metadata_location``, remembered per head file and cut: hashing a long
        history's metadata costs more than serving it from the cache."""
        key = (head_location, snapshot_id, barrier, kind)
        location = self._cut_locations.get(key)
        if location is None:
            location = views.cut_metadata_location(head_location, served)
            self._cut_locations.put(key, location)
        return location

    def delete_cut_files(self, locations: list[str]) -> None:
        """Delete views' cut files no session can use any more. Runs after the transaction that
        forgot them committed; a file that cannot be deleted is logged and left."""
        for location in locations:
            try:
                self.io(location).delete(location)
            except FileNotFoundError:
                pass  # never written (its load failed after recording it), or deleted already
            except OSError:
                logger.warning("cut_file_not_deleted", extra={"location": location},
                               exc_info=True)

    def purge(self, metadata_location: str) -> None:
        """Delete every file of a dropped table: data, manifests, manifest lists, metadata.
        Runs after the drop committed; a file that cannot be deleted is logged and left."""
        try:
            metadata = self.read(metadata_location)
        except Exception:  # noqa: BLE001 - the table is dropped either way
            logger.warning("purge_unreadable_metadata", extra={"location": metadata_location})
            return
        io = self.io(metadata_location)
        manifests: list[ManifestFile] = []
        manifest_lists: set[str] = set()
        for snapshot in metadata.snapshots:
            try:
                manifests += snapshot.manifests(io)
            except OSError:
                logger.warning("purge_unreadable_manifest_list",
                               extra={"location": snapshot.manifest_list})
            manifest_lists.add(snapshot.manifest_list)
        delete_data_files(io, manifests)
        delete_files(io, {m.manifest_path for m in manifests}, "manifest")
        delete_files(io, manifest_lists, "manifest list")
        delete_files(io, {entry.metadata_file for entry in metadata.metadata_log},
                     "previous metadata")
        delete_files(io, {metadata_location}, "metadata")
