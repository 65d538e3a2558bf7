"""How the server reaches an object store (``s3://``): each location's FileIO properties, the
conditional writer of files that must never be overwritten, the paged listing and batched
deletion a purge goes through, and the store's failures as 503.

A location's properties are the AWS variables' (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``), overlaid with those of every entry
of ``METASERVICE_STORAGE_PROPERTIES`` and of ``METASERVICE_STORAGE_SECRET_FILE`` it lies under,
the longest prefix last, with the connect and request timeouts of the settings. pyiceberg's
FileIO reads, lists and deletes with them.

pyiceberg's FileIO cannot write an object only if it is absent: Arrow's S3 file system sends no
``If-None-Match``. Metadata files and cut files are written by ``put_if_absent`` instead, a
``PutObject`` with ``If-None-Match: *`` through botocore (AWS's own SDK core), signed with the
same properties: of two writers of one key exactly one succeeds, the other is told the object is
there (``412 PreconditionFailed``) and nothing is overwritten.

A store that does not answer (refused, reset, or silent beyond the timeouts) fails the request
with ``503 object_store_unavailable`` and ``Retry-After``. No secret is ever logged: the
properties are never put in a message.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

from pyiceberg.io import FileIO, load_file_io

from metaservice.catalog.errors import ServiceUnavailableError
from metaservice.settings import Settings

logger = logging.getLogger(__name__)

OBJECT_STORE_UNAVAILABLE = "object_store_unavailable"

_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})

# pyiceberg's FileIO property names.
ENDPOINT = "s3.endpoint"
ACCESS_KEY_ID = "s3.access-key-id"
SECRET_ACCESS_KEY = "s3.secret-access-key"  # noqa: S105 - a property's name
SESSION_TOKEN = "s3.session-token"  # noqa: S105 - a property's name
REGION = "s3.region"
FORCE_VIRTUAL_ADDRESSING = "s3.force-virtual-addressing"
CONNECT_TIMEOUT = "s3.connect-timeout"
REQUEST_TIMEOUT = "s3.request-timeout"


class StoreUnavailableError(ServiceUnavailableError):
    """The object store did not answer in time, or refused the connection: retry later."""

    code = OBJECT_STORE_UNAVAILABLE

    def __init__(self, message: str) -> None:
        super().__init__(f"metaservice {OBJECT_STORE_UNAVAILABLE}: {message}")


def is_object_store(location: str) -> bool:
    return urlparse(location).scheme.lower() in _S3_SCHEMES


def _bucket_and_key(location: str) -> tuple[str, str]:
    parsed = urlparse(location)
    return parsed.netloc, parsed.path.lstrip("/")


def _prefix(location: str) -> str:
    """A location as compared for its properties: ``s3a://``/``s3n://`` read as ``s3://``, no
    trailing ``/``."""
    parsed = urlparse(location)
    scheme = parsed.scheme.lower()
    scheme = "s3" if scheme in _S3_SCHEMES else scheme
    return f"{scheme}://{parsed.netloc}{parsed.path}".rstrip("/")


def base_properties(settings: Settings) -> dict[str, str]:
    """The FileIO properties every location gets: the AWS variables' and the timeouts."""
    properties = {CONNECT_TIMEOUT: f"{settings.storage_connect_seconds:g}",
                  REQUEST_TIMEOUT: f"{settings.storage_request_seconds:g}"}
    if settings.aws_access_key_id:
        properties[ACCESS_KEY_ID] = settings.aws_access_key_id
    if settings.aws_secret_access_key is not None:
        properties[SECRET_ACCESS_KEY] = settings.aws_secret_access_key.get_secret_value()
    if settings.aws_session_token is not None:
        properties[SESSION_TOKEN] = settings.aws_session_token.get_secret_value()
    if settings.aws_endpoint_url:
        properties[ENDPOINT] = settings.aws_endpoint_url
    region = settings.aws_region or ("us-east-1" if settings.aws_endpoint_url else None)
    if region:
        # Given, pyiceberg never asks AWS for the bucket's region (it would, an endpoint set
        # or not, and fail without a route to AWS).
        properties[REGION] = region
    path_style = (settings.s3_path_style if settings.s3_path_style is not None
                  else bool(settings.aws_endpoint_url))
    properties[FORCE_VIRTUAL_ADDRESSING] = "false" if path_style else "true"
    return properties


def location_properties(settings: Settings) -> dict[str, dict[str, str]]:
    """``METASERVICE_STORAGE_PROPERTIES`` overlaid with ``METASERVICE_STORAGE_SECRET_FILE``'s,
    by location prefix.

    Raises:
        ValueError: the secret file cannot be read, or is not such an object (its content is
            never in the message).
    """
    merged = {_prefix(k): dict(v) for k, v in settings.storage_properties.items()}
    if settings.storage_secret_file:
        try:
            with open(settings.storage_secret_file, encoding="utf-8") as handle:
                content = json.load(handle)
        except (OSError, ValueError) as exc:
            raise ValueError(f"METASERVICE_STORAGE_SECRET_FILE {settings.storage_secret_file}: "
                             f"cannot be read as JSON ({type(exc).__name__})") from None
        if not isinstance(content, dict) or not all(
                isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
                for v in content.values()):
            raise ValueError(f"METASERVICE_STORAGE_SECRET_FILE {settings.storage_secret_file}: "
                             "not a JSON object of locations to objects of string properties")
        for location, properties in content.items():
            merged.setdefault(_prefix(location), {}).update(properties)
    return merged


class ObjectStores:
    """FileIOs and conditional writers for the locations the server touches, one per set of
    properties, built on first use and kept."""

    def __init__(self, base: Mapping[str, str] | None = None,
                 by_location: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self._base = dict(base or {})
        self._by_location = sorted(((_prefix(k), dict(v)) for k, v in (by_location or {}).items()),
                                   key=lambda item: len(item[0]))
        self._ios: dict[tuple[tuple[str, str], ...], FileIO] = {}
        self._clients: dict[tuple[tuple[str, str], ...], Any] = {}
        self._lock = threading.Lock()
        self._client_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> ObjectStores:
        return cls(base_properties(settings), location_properties(settings))

    def properties(self, location: str) -> dict[str, str]:
        """The FileIO properties of ``location``."""
        key = _prefix(location)
        properties = dict(self._base)
        for prefix, overlay in self._by_location:
            if key == prefix or key.startswith(prefix + "/"):
                properties.update(overlay)
        return properties

    def io(self, location: str) -> FileIO:
        if not is_object_store(location):
            # Local files need no properties; one FileIO serves them all.
            key: tuple[tuple[str, str], ...] = ()
            properties: dict[str, str] = {}
        else:
            properties = self.properties(location)
            key = tuple(sorted(properties.items()))
        with self._lock:
            io = self._ios.get(key)
            if io is None:
                io = self._ios[key] = load_file_io(properties, location)
            return io

    def _client(self, location: str) -> Any:
        properties = self.properties(location)
        key = tuple(sorted(properties.items()))
        with self._client_lock:  # one client per set of properties, made once (it takes a while)
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = self._new_client(properties)
            return client

    def _new_client(self, properties: Mapping[str, str]) -> Any:
        import botocore.config
        import botocore.session

        virtual = properties.get(FORCE_VIRTUAL_ADDRESSING, "true").lower() == "true"
        config = botocore.config.Config(
            connect_timeout=float(properties.get(CONNECT_TIMEOUT, 5)),
            read_timeout=float(properties.get(REQUEST_TIMEOUT, 20)),
            retries={"total_max_attempts": 1},  # one try: the request's time is the timeouts'
            s3={"addressing_style": "virtual" if virtual else "path"},
        )
        return botocore.session.get_session().create_client(
            "s3", endpoint_url=properties.get(ENDPOINT),
            region_name=properties.get(REGION, "us-east-1"),
            aws_access_key_id=properties.get(ACCESS_KEY_ID),
            aws_secret_access_key=properties.get(SECRET_ACCESS_KEY),
            aws_session_token=properties.get(SESSION_TOKEN), config=config)

    def put_if_absent(self, location: str, content: bytes) -> bool:
        """Write the object at ``location`` unless one is there (``If-None-Match: *``): True
        when this call wrote it, False when it was there already (written by another)."""
        from botocore.exceptions import ClientError

        bucket, key = _bucket_and_key(location)
        with unavailable_as_503(location):
            try:
                self._client(location).put_object(Bucket=bucket, Key=key, Body=content,
                                                   IfNoneMatch="*")
            except ClientError as exc:
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                code = exc.response.get("Error", {}).get("Code")
                # 409 ConditionalRequestConflict: a concurrent conditional write of the key.
                if status in (412, 409) or code in ("PreconditionFailed",
                                                    "ConditionalRequestConflict"):
                    return False
                raise
        return True

    def list_page(self, location: str, *, after: str | None, limit: int) -> list[str]:
        """One page of the objects under the "directory" ``location`` (``ListObjectsV2``,
        ``Prefix`` its key and ``/``, at most ``limit``, in key order after the object
        ``after``), as ``s3://`` locations of the bucket ``location`` names.

        Raises:
            StoreUnavailableError: the store did not answer.
        """
        bucket, key = _bucket_and_key(location)
        prefix = key.rstrip("/") + "/"
        request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": limit}
        if after is not None:
            request["StartAfter"] = _bucket_and_key(after)[1]
        with unavailable_as_503(location):
            answer = self._client(location).list_objects_v2(**request)
        return [f"s3://{bucket}/{item['Key']}" for item in answer.get("Contents", [])]

    def delete_many(self, locations: list[str]) -> list[str]:
        """Delete objects, at most 1000 of one bucket (one ``DeleteObjects``); answers those
        the store did not delete (an object already gone counts as deleted).

        Raises:
            StoreUnavailableError: the store did not answer.
        """
        if not locations:
            return []
        buckets = {_bucket_and_key(location)[0] for location in locations}
        if len(buckets) != 1 or len(locations) > 1000:
            raise ValueError("DeleteObjects takes at most 1000 objects of one bucket")
        bucket = buckets.pop()
        with unavailable_as_503(locations[0]):
            answer = self._client(locations[0]).delete_objects(Bucket=bucket, Delete={
                "Objects": [{"Key": _bucket_and_key(location)[1]} for location in locations],
                "Quiet": True})
        return [f"s3://{bucket}/{error['Key']}" for error in answer.get("Errors", [])
                if error.get("Code") != "NoSuchKey"]


def _unavailable(exc: BaseException) -> bool:
    """Whether an error says the store did not answer (rather than answered no)."""
    try:
        from botocore.exceptions import ConnectionError as BotoConnectionError
        from botocore.exceptions import HTTPClientError
    except ImportError:  # pragma: no cover - botocore comes with the server
        boto: tuple[type[BaseException], ...] = ()
    else:
        boto = (BotoConnectionError, HTTPClientError)
    if isinstance(exc, boto):
        return True
    if isinstance(exc, (FileNotFoundError, FileExistsError, PermissionError)):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, OSError):
        # Arrow's S3 errors are OSErrors naming the AWS SDK's error.
        text = str(exc)
        return any(word in text for word in (
            "NETWORK_CONNECTION", "Timeout", "timed out", "Couldn't connect", "connect to",
            "Connection refused", "curlCode", "Connection reset", "SERVICE_UNAVAILABLE",
            "SLOW_DOWN", "INTERNAL_FAILURE"))
    return False


@contextmanager
def unavailable_as_503(location: str) -> Iterator[None]:
    """The store's silence or refusal to connect, inside the block, as ``StoreUnavailableError``
    (the location named, no property)."""
    try:
        yield
    except StoreUnavailableError:
        raise
    except Exception as exc:
        if not _unavailable(exc):
            raise
        logger.warning("object_store_unavailable",
                       extra={"location": location[:300], "error_class": type(exc).__name__})
        raise StoreUnavailableError(
            f"the object store did not answer for {location[:300]} ({type(exc).__name__}); "
            "retry later") from None
