"""Metadata files in the warehouse, through pyiceberg's FileIO (local paths, ``s3://``, …).

An object store's locations are reached with the properties ``object_store`` gives them (the AWS
variables, the server's own settings), and the files that must never be overwritten (metadata
files, cut files) are written there only if absent (``ObjectStores.put_if_absent``). A store
that does not answer fails the request with 503 ``object_store_unavailable``.

A metadata file is written once and never changed, so files are cached by location: parsed
(``read``), and as the JSON the catalog answers with (``metadata_json``, bounded by
``METASERVICE_METADATA_CACHE_BYTES``), so that a table's load is its pointer lookup and bytes
already serialised. A file is written before the transaction that points at it commits: a crash
in between leaves an unreferenced file, never a pointer without its file.

A table at a read session's cut (docs/contract.md#a-table-at-a-cut) is a file too, a cut file, named
after what decides its content and shared by every read session serving that cut: written by
whichever request needs it first, possibly by several at once (``write_shared``), never named by a
table's pointer. It is deleted (``delete_cut_files``) after the commit that expires its snapshot, or
the drop that purges its table, committed.

Every location the server writes, reads or deletes lies inside the warehouse or a location the
operator allows (``METASERVICE_ALLOWED_LOCATIONS``), compared after normalisation and, for local
files, after resolving symlinks (``confine``); a purge lists and deletes, in pages, only files
under the locations the table claimed (``list_claimed``, ``delete_files``; the purge itself is
``catalog/tables/purges.py``). A metadata file is read only if it is a regular file under the
size cap, within a time limit (docs/contract.md#no-io-under-a-write-lock).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import io as _io
import logging
import os
import posixpath
import re
import stat
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Generic, TypeVar
from urllib.parse import urlparse

from pyiceberg.io import FileIO
from pyiceberg.serializers import Compressor, FromByteStream
from pyiceberg.table.locations import SimpleLocationProvider
from pyiceberg.table.metadata import TableMetadata

from metaservice.catalog.errors import (
    METADATA_TOO_LARGE,
    RefusedError,
    ServiceUnavailableError,
    outside_warehouse,
)
from metaservice.catalog.read_sessions import consistent_warehouses
from metaservice.catalog.storage.object_store import (
    ObjectStores,
    StoreUnavailableError,
    is_object_store,
    unavailable_as_503,
)
from metaservice.names import namespace_levels

logger = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

_CACHE_SIZE = 256

# Schemes that name the same store (pyiceberg's FileIO reads each alike).
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "abfss": "abfs", "wasbs": "wasb"}

# Table properties naming where a table's files go: each must lie inside the warehouse.
LOCATION_PROPERTIES = ("write.data.path", "write.metadata.path", "write.folder-storage.path",
                       "write.object-storage.path")


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _has_scheme(location: str) -> bool:
    """Whether a location names a scheme (``s3://…``, ``file:/…``), as a URL does."""
    return _SCHEME.match(location) is not None


class MetadataFileError(ValueError):
    """A metadata file that cannot be read as one: not a regular file, too large, not table
    metadata."""


class MetadataTooLargeError(MetadataFileError):
    """A metadata file larger than the size cap (stored, or inflated)."""


_SEGMENT = re.compile(r"[\w .~-]+")
_NOT_SEGMENT = re.compile(r"[^\w .~-]")


def location_segment(part: str) -> str:
    """The directory of a name's part in a default location: the part itself when it holds only
    letters, digits, spaces and ``_.~-``, which every FileIO reads alike; else the part with
    each other character made ``_`` and a digest of the whole part appended, since engines read
    ``#``, ``?``, ``%`` or ``:`` in a location as a URL's fragment, query, escape or scheme.
    Two parts never share a directory (the digest)."""
    if _SEGMENT.fullmatch(part):
        return part
    digest = hashlib.sha256(part.encode("utf-8")).hexdigest()[:8]
    return f"{_NOT_SEGMENT.sub('_', part)}-{digest}"


def _local_path(location: str) -> str | None:
    """The path of a location on the local file system (``/p``, ``file:/p``, ``file:///p``),
    None for an object store's."""
    if not _has_scheme(location):
        return location
    parsed = urlparse(location)
    if parsed.scheme.lower() != "file" or parsed.netloc not in ("", "localhost"):
        return None
    return parsed.path if parsed.path.startswith("/") else None


def _create_synced(path: str, content: bytes) -> None:
    """Create the file ``path`` (never an existing one) with ``content``, its data and its
    directory's entry on disk when this returns; a file left half written by a failure is
    removed.

    Raises:
        FileExistsError: ``path`` exists already.
    """
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb", closefd=False) as stream:
            stream.write(content)
        os.fsync(descriptor)
    except BaseException:
        os.close(descriptor)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(descriptor)
    _sync(directory)


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

    def forget(self, key: K) -> None:
        with self._lock:
            self._items.pop(key, None)


class MetadataJsonCache:
    """The JSON of metadata files by location (``model_dump_json``, as the catalog answers
    it), the most recently used kept up to ``limit`` bytes in all (0 keeps none); safe across
    threads. A metadata file never changes once written, so an entry never goes stale; one is
    put only once its file is on disk (written, or read), and goes when the server deletes the
    file. ``hits`` and ``misses`` count lookups."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.hits = 0
        self.misses = 0
        self._size = 0
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """The bytes held, at most ``limit``."""
        return self._size

    def __len__(self) -> int:
        return len(self._items)

    def get(self, location: str) -> bytes | None:
        with self._lock:
            content = self._items.get(location)
            if content is None:
                self.misses += 1
            else:
                self.hits += 1
                self._items.move_to_end(location)
            return content

    def put(self, location: str, content: bytes) -> None:
        """Keep ``content``, evicting the least recently used entries beyond ``limit``; a file
        larger than ``limit`` is not kept."""
        if len(content) > self.limit:
            return
        with self._lock:
            self._drop(location)
            self._items[location] = content
            self._size += len(content)
            while self._size > self.limit:
                _, evicted = self._items.popitem(last=False)
                self._size -= len(evicted)

    def forget(self, location: str) -> None:
        with self._lock:
            self._drop(location)

    def _drop(self, location: str) -> None:
        content = self._items.pop(location, None)
        if content is not None:
            self._size -= len(content)


class Warehouse:
    """Where the catalog's tables live (``METASERVICE_WAREHOUSE``), and the only places the
    server touches files."""

    def __init__(self, root: str, allowed: Sequence[str] = (), *,
                 max_metadata_bytes: int = 64 * 1024 * 1024,
                 read_seconds: float = 30.0,
                 metadata_cache_bytes: int = 64 * 1024 * 1024,
                 stores: ObjectStores | None = None) -> None:
        if not _has_scheme(root):
            root = os.path.abspath(root)
        self.root = root.rstrip("/")
        roots = [self.root, *allowed]
        self._roots = [key for key in (self._key(r) for r in roots) if key is not None]
        self.max_metadata_bytes = max_metadata_bytes
        self.stores = stores if stores is not None else ObjectStores()
        self.read_seconds = read_seconds
        self._readers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="metadata-read")
        self._files: _Recent[str, TableMetadata] = _Recent()
        self.metadata_cache = MetadataJsonCache(metadata_cache_bytes)
        self._cut_locations: _Recent[tuple[str, int, int, str], str] = _Recent()

    # -- confinement -------------------------------------------------------------------------

    @staticmethod
    def _key(location: str) -> str | None:
        """The location as compared: ``scheme://netloc/normalised/path``, a local path with its
        symlinks resolved; None for a location that cannot be one (empty, NUL, no path)."""
        if (not location or "\x00" in location or location != location.strip()
                or "#" in location or "?" in location):
            return None  # FileIOs read '#' and '?' as a URL's fragment and query, not alike
        local = _local_path(location)
        if local is not None:
            if not local:
                return None
            return "file://" + os.path.realpath(os.path.abspath(local))
        parsed = urlparse(location)
        scheme = _SCHEME_ALIASES.get(parsed.scheme.lower(), parsed.scheme.lower())
        if (not scheme or scheme == "file" or not parsed.netloc or parsed.query
                or parsed.fragment):
            return None
        path = posixpath.normpath("/" + parsed.path) if parsed.path else "/"
        path = "/" + path.lstrip("/")
        return f"{scheme}://{parsed.netloc.lower()}{path.rstrip('/') or '/'}"

    def key(self, location: str, what: str = "location") -> str:
        """``location`` as compared, once it is known to lie inside the warehouse (or an
        allowed location).

        Raises:
            RefusedError: 400 ``location_outside_warehouse``.
        """
        key = self._key(location)
        if key is None or not any(inside(key, root) for root in self._roots):
            raise outside_warehouse(
                f"{what} {location[:300]!r} lies outside the warehouse {self.root!r} and the "
                "allowed locations (METASERVICE_ALLOWED_LOCATIONS)", location=location[:300])
        return key

    def confine(self, location: str, what: str = "location") -> str:
        """``location`` once it is known to lie inside the warehouse: as the client spelled it
        (``file:/p``, ``file:///p`` and ``/p`` alike, as Iceberg's own catalogs keep it) but for
        a trailing ``/``, unless it has ``.``/``..`` segments or duplicate separators, which
        are normalised away."""
        self.key(location, what)
        trimmed = location.rstrip("/")
        path = urlparse(trimmed).path if _has_scheme(trimmed) else trimmed
        segments = path.split("/")[1:] if path.startswith("/") else path.split("/")
        if trimmed and not any(part in ("", ".", "..") for part in segments):
            return trimmed
        local = _local_path(location)
        if local is not None:
            normal = os.path.normpath(os.path.abspath(local))
            return normal if not _has_scheme(location) else "file://" + normal
        parsed = urlparse(location)
        path = posixpath.normpath("/" + parsed.path).lstrip("/")
        return f"{parsed.scheme}://{parsed.netloc}/{path}".rstrip("/")

    def confine_table(self, metadata: TableMetadata) -> list[str]:
        """The keys of the locations a table's files may lie under (its location and its
        ``write.*.path`` properties), once each lies inside the warehouse. A table's location
        lies at least two levels below the warehouse root (``<root>/<namespace>/<table>``), so
        that no table claims the root or a namespace's default directory."""
        key = self.key(metadata.location, "table location")
        root = self._roots[0]
        if key == root or inside(root, key.rsplit("/", 1)[0]):
            raise outside_warehouse(
                f"table location {metadata.location[:300]!r} is the warehouse root or a "
                f"namespace's directory in it: a table lies in {self.root}/<namespace>/<table> "
                "or deeper", location=metadata.location[:300])
        keys = [key]
        for name in LOCATION_PROPERTIES:
            value = metadata.properties.get(name)
            if value is not None:
                keys.append(self.key(value, f"table property {name}"))
        return keys

    # -- files -------------------------------------------------------------------------------

    def io(self, location: str) -> FileIO:
        """The FileIO of ``location``, with its store's properties (``object_store``)."""
        return self.stores.io(location)

    def write_new(self, location: str, content: bytes) -> None:
        """Write a file that must not exist yet (``content`` as stored), durably before this
        returns: the commit that names it is recorded only after. A local file is created
        exclusively (``O_EXCL``: the system refuses a name taken meanwhile) and synced with its
        directory entry; an object store's object is put with ``If-None-Match: *``, so that a
        file written meanwhile is never overwritten.

        Raises:
            FileExistsError: the file is there already.
            StoreUnavailableError: the store did not answer.
        """
        local = _local_path(location)
        if local is not None:
            _create_synced(local, content)
        elif is_object_store(location):
            if not self.stores.put_if_absent(location, content):
                raise FileExistsError(f"{location} exists already")
        else:
            _write_new(self.io(location), location, content)

    def default_table_location(self, namespace: str, table: str) -> str:
        """``<warehouse>/<level>/.../<table>``: a namespace's levels are directories, each
        named as :func:`location_segment` names it."""
        return "/".join((self.root, *map(location_segment, namespace_levels(namespace)),
                         location_segment(table)))

    def new_metadata_location(self, metadata: TableMetadata, version: int) -> str:
        """Where the table's next metadata file goes (``write.metadata.path`` or
        ``<location>/metadata``). Not through ``load_location_provider``: it would import and
        call, here in the server, the class a table property names
        (``write.py-location-provider.impl``), and fail on properties that only concern data
        files."""
        provider = SimpleLocationProvider(metadata.location.rstrip("/"), metadata.properties)
        location = provider.new_table_metadata_file_location(version)
        self.key(location, "metadata location")
        return location

    def write(self, metadata: TableMetadata, location: str) -> None:
        """Write a new metadata file (never overwrites one), no larger than the catalog reads.

        Raises:
            RefusedError: ``metadata_too_large``, larger than ``max_metadata_bytes``.
        """
        self.key(location, "metadata location")
        content = metadata.model_dump_json().encode("utf-8")
        if len(content) > self.max_metadata_bytes:
            raise RefusedError(
                METADATA_TOO_LARGE,
                f"the table's metadata would be {len(content)} bytes, more than the catalog "
                f"reads ({self.max_metadata_bytes}, METASERVICE_MAX_METADATA_BYTES)",
                {"bytes": len(content), "limit": self.max_metadata_bytes})
        self.write_new(location, Compressor.get_compressor(location).bytes_compressor()(content))
        self._files.put(location, metadata)
        self.metadata_cache.put(location, content)  # the answer of the commit and of loads

    def write_shared(self, content: bytes, location: str) -> None:
        """Write a metadata file whose name stands for its content (``content``, the metadata's
        JSON), unless it is there already; its JSON is cached then (``metadata_json``).

        Requests serving the same content may race to write it: each succeeds and no reader
        ever sees part of the file. A local file is written under a temporary name and linked
        into place (a link never replaces a file; pyarrow's ``create`` would truncate one
        written meanwhile); an object store's object appears whole when its upload completes,
        and a racing upload of it is refused (``If-None-Match: *``): the first stays. Its
        metadata is never read back: the catalog derives it from the file it comes from.
        """
        if is_object_store(location):
            self.stores.put_if_absent(location, content)  # False: written by another already
            self.metadata_cache.put(location, content)
            return
        io = self.io(location)
        if not io.new_input(location).exists():
            path = _local_path(location)
            if path is None:
                # FileExistsError: written meanwhile by another request, the same content.
                with contextlib.suppress(FileExistsError):
                    _write_new(io, location, content)
            else:
                directory = os.path.dirname(path)
                os.makedirs(directory, exist_ok=True)
                handle, temporary = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=directory)
                os.close(handle)
                try:
                    _write_new(io, temporary, content, overwrite=True)
                    _sync(temporary)  # on disk before its name is: a crash leaves no empty file
                    # FileExistsError: linked meanwhile by another request, the same content.
                    with contextlib.suppress(FileExistsError):
                        os.link(temporary, path)
                    _sync(directory)
                finally:
                    os.unlink(temporary)
        self.metadata_cache.put(location, content)

    def read(self, location: str) -> TableMetadata:
        """The metadata file at ``location``: a regular file inside the warehouse, at most
        ``max_metadata_bytes``, read within ``read_seconds``.

        Raises:
            RefusedError: 400 ``location_outside_warehouse``.
            MetadataFileError: not a regular file, too large, or not table metadata.
            ServiceUnavailableError: not read in time.
        """
        cached = self._files.get(location)
        if cached is not None:
            return cached
        self.key(location, "metadata file")
        future = self._readers.submit(self._read_file, location)
        try:
            metadata = future.result(timeout=self.read_seconds)
        except FutureTimeout:
            future.cancel()
            raise _not_read_in_time("metadata file", location, self.read_seconds) from None
        self._files.put(location, metadata)
        return metadata

    def metadata_json(self, location: str) -> bytes:
        """The metadata file at ``location`` as the catalog answers it (its
        ``model_dump_json``), serialised once while it stays in ``metadata_cache``: the file
        never changes. Raises what ``read`` raises."""
        content = self.metadata_cache.get(location)
        if content is None:
            content = self.read(location).model_dump_json().encode()
            self.metadata_cache.put(location, content)
        return content

    def read_bytes(self, location: str, what: str = "metadata file") -> bytes:
        """The content of a file inside the warehouse that is read as a metadata file: a regular
        file of at most ``max_metadata_bytes`` (stored, and inflated when its name says it is
        gzip-compressed), read within ``read_seconds`` (an Iceberg view's metadata file, say).

        Raises:
            RefusedError: 400 ``location_outside_warehouse``.
            MetadataFileError: not a regular file, or too large.
            ServiceUnavailableError: not read in time.
        """
        self.key(location, what)
        future = self._readers.submit(self._read_content, location)
        try:
            return future.result(timeout=self.read_seconds)
        except FutureTimeout:
            future.cancel()
            raise _not_read_in_time(what, location, self.read_seconds) from None

    def _read_file(self, location: str) -> TableMetadata:
        content = self._read_content(location)
        try:
            return FromByteStream.table_metadata(_io.BytesIO(content))
        except Exception as exc:  # noqa: BLE001 - any content that is not table metadata
            raise MetadataFileError(
                f"{location} is not Iceberg table metadata: {str(exc)[:300]}") from None

    def _read_content(self, location: str) -> bytes:
        local = _local_path(location)
        if local is not None:
            try:
                # O_NONBLOCK: opening a FIFO never waits for a writer; fstat then refuses it.
                descriptor = os.open(local, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as exc:
                raise MetadataFileError(f"cannot open {location}: {exc.strerror}") from None
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode):
                os.close(descriptor)
                raise MetadataFileError(f"{location} is not a regular file")
            with os.fdopen(descriptor, "rb") as handle:
                if status.st_size > self.max_metadata_bytes:
                    raise MetadataTooLargeError(
                        f"{location} is larger than {self.max_metadata_bytes} bytes")
                content = handle.read(self.max_metadata_bytes + 1)
        else:
            with unavailable_as_503(location):
                input_file = self.io(location).new_input(location)
                if len(input_file) > self.max_metadata_bytes:
                    raise MetadataTooLargeError(
                        f"{location} is larger than {self.max_metadata_bytes} bytes")
                with input_file.open() as stream:
                    content = stream.read(self.max_metadata_bytes + 1)
        if len(content) > self.max_metadata_bytes:
            raise MetadataTooLargeError(
                f"{location} is larger than {self.max_metadata_bytes} bytes")
        try:
            with Compressor.get_compressor(location).stream_decompressor(
                    _io.BytesIO(content)) as stream:
                text = stream.read(self.max_metadata_bytes + 1)
        except Exception as exc:  # noqa: BLE001 - not what its name says it is
            raise MetadataFileError(f"{location} cannot be decompressed: {exc}") from None
        if len(text) > self.max_metadata_bytes:
            raise MetadataTooLargeError(
                f"{location} inflates to larger than {self.max_metadata_bytes} bytes")
        return text  # type: ignore[no-any-return]

    def remembered_cut_location(self, head_location: str, snapshot_id: int, barrier: int,
                                kind: str) -> str | None:
        """The location ``cut_location`` gave for this head file and cut, if remembered."""
        return self._cut_locations.get((head_location, snapshot_id, barrier, kind))

    def cut_location(self, head_location: str, snapshot_id: int, barrier: int, kind: str,
                     content: bytes) -> str:
        """``consistent_warehouses.cut_metadata_location`` of the served metadata's JSON
        (``content``), remembered per head file and cut: a later load at the cut finds its
        file's location, and its JSON in the cache, without computing the cut again."""
        key = (head_location, snapshot_id, barrier, kind)
        location = self._cut_locations.get(key)
        if location is None:
            location = consistent_warehouses.cut_metadata_location(head_location, content)
            self._cut_locations.put(key, location)
        return location

    def delete_cut_files(self, locations: list[str]) -> None:
        """Delete cut files no read session can use any more. Runs after the transaction that
        forgot them committed; a file that cannot be deleted is logged and left."""
        for location in locations:
            self.metadata_cache.forget(location)
            try:
                self.io(location).delete(location)
            except FileNotFoundError:
                pass  # never written (its load failed after recording it), or deleted already
            except OSError:
                logger.warning("cut_file_not_deleted", extra={"location": location},
                               exc_info=True)

    # -- purges: listing and deleting in pages, under a table's claims ------------------------

    def list_claimed(self, claim: str, *, after: str | None, limit: int) -> list[str]:
        """One page of the files under ``claim`` (a location a table claimed, as ``key`` gives
        it), at most ``limit``, in order after the file ``after`` (the last of the page before):
        an ``s3://`` prefix through ``ListObjectsV2``, a local directory walked (symbolic links
        are listed as files, never followed). A location of another scheme is not listed (the
        server writes its warehouse on local disks and S3 only): logged, and answered empty.

        Raises:
            StoreUnavailableError: the store did not answer.
        """
        if claim.startswith("file://"):
            return _walk_after(claim[len("file://"):], after, limit)
        if is_object_store(claim):
            return self.stores.list_page(claim, after=after, limit=limit)
        logger.warning("purge_location_not_listed", extra={"location": claim[:300]})
        return []

    def delete_files(self, locations: Sequence[str]) -> list[str]:
        """Delete files ``list_claimed`` gave (the caller decides which); answers those that
        were not deleted (logged). A file already gone counts as deleted.

        Raises:
            StoreUnavailableError: the store did not answer.
        """
        failed: list[str] = []
        by_bucket: dict[str, list[str]] = {}
        for location in locations:
            self._files.forget(location)
            self.metadata_cache.forget(location)
            if is_object_store(location):
                by_bucket.setdefault(urlparse(location).netloc, []).append(location)
                continue
            try:
                os.remove(location)
            except FileNotFoundError:
                pass
            except OSError:
                failed.append(location)
        for bucket_locations in by_bucket.values():
            for start in range(0, len(bucket_locations), 1000):
                failed += self.stores.delete_many(bucket_locations[start:start + 1000])
        for location in failed:
            logger.warning("purge_file_not_deleted", extra={"location": location[:300]})
        return failed

    def forget(self, location: str) -> None:
        """Forget a metadata file's parsed and JSON copies (its table is purged)."""
        self._files.forget(location)
        self.metadata_cache.forget(location)


def _walk_after(directory: str, after: str | None, limit: int) -> list[str]:
    """The first ``limit`` files under ``directory`` (every entry that is not a directory,
    symbolic links included and not followed), in path order, after ``after``. Nothing when the
    directory is no longer where it was when claimed (a symbolic link swapped in on its path
    since: the claim was recorded with its links resolved)."""
    if os.path.realpath(directory) != directory:
        logger.warning("purge_skipped_moved_location", extra={"location": directory[:300]})
        return []
    found: list[str] = []
    for root, directories, files in os.walk(directory):
        # os.walk lists a symbolic link to a directory among the directories, never entering it.
        found += [os.path.join(root, name) for name in files]
        found += [os.path.join(root, name) for name in directories
                  if os.path.islink(os.path.join(root, name))]
    found.sort()
    if after is not None:
        found = found[bisect.bisect_right(found, after):]
    return found[:limit]


def _not_read_in_time(what: str, location: str, seconds: float) -> ServiceUnavailableError:
    message = f"{what} {location} was not read within {seconds:g} s"
    if is_object_store(location):
        return StoreUnavailableError(message)
    return ServiceUnavailableError(message)


def _write_new(io: FileIO, location: str, content: bytes, *, overwrite: bool = False) -> None:
    with io.new_output(location).create(overwrite=overwrite) as stream:
        stream.write(content)


def inside(key: str, root: str) -> bool:
    """Whether the location ``key`` is ``root`` or lies under it (both as ``Warehouse._key``
    gives them)."""
    return key == root or key.startswith(root.rstrip("/") + "/")
