"""Credentials the catalog vends to its clients for a table's files on an object store
(docs/operations.md#vended-credentials): temporary keys from STS ``AssumeRole`` with an inline
session policy that narrows the role to the table's prefixes, read-only or read-write.

The server's own keys sign the ``AssumeRole`` call and are never handed out: a client gets the
session's access key, secret and token, and the store refuses it everything outside the policy
(another table's objects, a listing of another prefix, and for a reader any write). The session
ends when STS says (``Expiration``); a client asks for new ones at ``…/credentials``.

A session is vended once per table's locations, rights and caller, and handed out again while
at least half its life is left (every client gets at least that long), so that a load (which
pyiceberg sends with the delegation header by default) asks STS once per table and caller per
half-session, not once per request. Each server process keeps its own sessions, a bounded
number, in memory.

No secret is logged or put in an error: a failure is logged by its class and STS's error code.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from metaservice.catalog.errors import ServiceUnavailableError
from metaservice.catalog.storage.object_store import (
    ACCESS_KEY_ID,
    CONNECT_TIMEOUT,
    ENDPOINT,
    FORCE_VIRTUAL_ADDRESSING,
    REGION,
    REQUEST_TIMEOUT,
    SECRET_ACCESS_KEY,
    SESSION_TOKEN,
    is_object_store,
)
from metaservice.logging_config import quiet_botocore

logger = logging.getLogger(__name__)

CREDENTIALS_UNAVAILABLE = "credentials_unavailable"

# The names Iceberg's Java S3FileIO reads beside pyiceberg's (object_store's are pyiceberg's).
PATH_STYLE_ACCESS = "s3.path-style-access"
SESSION_TOKEN_EXPIRES_AT_MS = "s3.session-token-expires-at-ms"  # noqa: S105 - a name
REFRESH_CREDENTIALS_ENDPOINT = "client.refresh-credentials-endpoint"
CLIENT_REGION = "client.region"
DEFAULT_REGION = "us-east-1"  # what the server signs with when no region is set

READ_ACTIONS = ("s3:GetObject",)
WRITE_ACTIONS = ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                 "s3:ListMultipartUploadParts")

_SESSION_NAME_CHARACTER = re.compile(r"[^\w+=,.@-]")

# sessions kept for handing out again (tables × rights × callers), the least recently used
# dropped first
SESSIONS_KEPT = 1024


class CredentialsUnavailableError(ServiceUnavailableError):
    """STS did not answer, or refused to vend: no credentials now (never the server's own)."""

    code = CREDENTIALS_UNAVAILABLE

    def __init__(self, message: str) -> None:
        super().__init__(f"metaservice {CREDENTIALS_UNAVAILABLE}: {message}")


@dataclass(frozen=True)
class VendedCredentials:
    """One STS session's keys (the secret and the token kept out of ``repr``)."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str = field(repr=False)
    expires_at_ms: int


def _bucket_and_prefix(key: str) -> tuple[str, str]:
    parsed = urlparse(key)
    return parsed.netloc, parsed.path.strip("/")


def session_policy(keys: Sequence[str], *, write: bool) -> dict[str, Any]:
    """The inline session policy of a table whose files lie under ``keys`` (``s3://bucket/p``):
    objects under each ``p/`` read (and written, deleted, multipart-aborted when ``write``),
    the bucket listed only under ``p/``, and the bucket's location asked (clients do).

    Raises:
        ValueError: a key is no ``s3://`` location, or has no prefix or a wildcard (either would
            widen the session beyond the table).
    """
    objects: list[str] = []
    listings: dict[str, list[str]] = {}
    for key in keys:
        if not is_object_store(key):
            raise ValueError(f"not an object store location: {key[:300]!r}")
        bucket, prefix = _bucket_and_prefix(key)
        if not bucket or not prefix or any(c in key for c in "*?$"):
            raise ValueError(f"cannot scope credentials to {key[:300]!r}")
        objects.append(f"arn:aws:s3:::{bucket}/{prefix}/*")
        listings.setdefault(bucket, []).extend([f"{prefix}/", f"{prefix}/*"])
    actions = [*READ_ACTIONS, *(WRITE_ACTIONS if write else ())]
    statements: list[dict[str, Any]] = [
        {"Effect": "Allow", "Action": actions, "Resource": objects}]
    for bucket, prefixes in listings.items():
        statements.append({"Effect": "Allow", "Action": ["s3:ListBucket"],
                           "Resource": [f"arn:aws:s3:::{bucket}"],
                           "Condition": {"StringLike": {"s3:prefix": prefixes}}})
        statements.append({"Effect": "Allow", "Action": ["s3:GetBucketLocation"],
                           "Resource": [f"arn:aws:s3:::{bucket}"]})
    return {"Version": "2012-10-17", "Statement": statements}


def session_name(caller: str | None) -> str:
    """An STS ``RoleSessionName`` naming the caller (2 to 64 of ``[\\w+=,.@-]``)."""
    name = "metaservice-" + _SESSION_NAME_CHARACTER.sub("-", caller or "anonymous")
    return name[:64]


class CredentialVendor:
    """Vends table-scoped credentials by STS ``AssumeRole`` of ``role_arn`` with a session
    policy, signed with the server's keys for the warehouse (``server_properties``)."""

    def __init__(self, role_arn: str, seconds: int, server_properties: Mapping[str, str],
                 sts_endpoint: str | None = None,
                 client_endpoint: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.role_arn = role_arn
        self.seconds = seconds
        self._clock = clock
        # (locations, write, caller) -> (the session, when it was vended, in ms)
        self._sessions: OrderedDict[tuple[tuple[str, ...], bool, str | None],
                                    tuple[VendedCredentials, int]] = OrderedDict()
        self._sessions_lock = threading.Lock()
        self._server = dict(server_properties)
        self._sts_endpoint = sts_endpoint or self._server.get(ENDPOINT)
        self._client_endpoint = client_endpoint or self._server.get(ENDPOINT)
        self._client: Any = None
        quiet_botocore()  # its DEBUG lines would print STS's answers: the vended secrets

    def _sts(self) -> Any:
        if self._client is None:
            import botocore.config
            import botocore.session

            properties = self._server
            self._client = botocore.session.get_session().create_client(
                "sts", endpoint_url=self._sts_endpoint,
                region_name=properties.get(REGION, DEFAULT_REGION),
                aws_access_key_id=properties.get(ACCESS_KEY_ID),
                aws_secret_access_key=properties.get(SECRET_ACCESS_KEY),
                aws_session_token=properties.get(SESSION_TOKEN),
                config=botocore.config.Config(
                    connect_timeout=float(properties.get(CONNECT_TIMEOUT, 5)),
                    read_timeout=float(properties.get(REQUEST_TIMEOUT, 20)),
                    retries={"total_max_attempts": 1}))
        return self._client

    def vend(self, keys: Sequence[str], *, write: bool, caller: str | None) -> VendedCredentials:
        """Temporary credentials for the objects under ``keys``, read-write when ``write``: the
        session vended last for the same keys, rights and caller while at least half its life
        is left, else a new one.

        Raises:
            CredentialsUnavailableError: STS failed or refused (logged by class and code).
            ValueError: the keys cannot be scoped (``session_policy``).
        """
        key = (tuple(keys), write, caller)
        now_ms = int(self._clock() * 1000)
        with self._sessions_lock:
            kept = self._sessions.get(key)
            if kept is not None:
                credentials, vended_ms = kept
                if credentials.expires_at_ms - now_ms >= (credentials.expires_at_ms
                                                          - vended_ms) / 2:
                    self._sessions.move_to_end(key)
                    return credentials
                del self._sessions[key]
        credentials = self._assume_role(keys, write=write, caller=caller)
        with self._sessions_lock:
            self._sessions[key] = (credentials, now_ms)
            self._sessions.move_to_end(key)
            while len(self._sessions) > SESSIONS_KEPT:
                self._sessions.popitem(last=False)
        return credentials

    def _assume_role(self, keys: Sequence[str], *, write: bool,
                     caller: str | None) -> VendedCredentials:
        from botocore.exceptions import BotoCoreError, ClientError

        policy = json.dumps(session_policy(keys, write=write), separators=(",", ":"))
        try:
            answer = self._sts().assume_role(
                RoleArn=self.role_arn, RoleSessionName=session_name(caller), Policy=policy,
                DurationSeconds=self.seconds)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "unknown"))[:80]
            logger.warning("credentials_not_vended",
                           extra={"error_class": type(exc).__name__, "sts_code": code})
            raise CredentialsUnavailableError(f"STS refused to vend credentials ({code})") \
                from None
        except BotoCoreError as exc:
            logger.warning("credentials_not_vended", extra={"error_class": type(exc).__name__})
            raise CredentialsUnavailableError(
                f"STS did not answer ({type(exc).__name__}); retry later") from None
        credentials = answer["Credentials"]
        logger.info("credentials_vended", extra={"write": write, "caller": caller,
                                                 "locations": len(keys)})
        return VendedCredentials(
            access_key_id=credentials["AccessKeyId"],
            secret_access_key=credentials["SecretAccessKey"],
            session_token=credentials["SessionToken"],
            expires_at_ms=int(credentials["Expiration"].timestamp() * 1000))

    def client_properties(self, credentials: VendedCredentials) -> dict[str, str]:
        """The FileIO properties a client reaches the store with: the session's keys, the
        endpoint, the region and the addressing (pyiceberg's and Java's names)."""
        properties = {ACCESS_KEY_ID: credentials.access_key_id,
                      SECRET_ACCESS_KEY: credentials.secret_access_key,
                      SESSION_TOKEN: credentials.session_token,
                      SESSION_TOKEN_EXPIRES_AT_MS: str(credentials.expires_at_ms)}
        if self._client_endpoint:
            properties[ENDPOINT] = self._client_endpoint
        properties[REGION] = properties[CLIENT_REGION] = self._server.get(REGION, DEFAULT_REGION)
        virtual = self._server.get(FORCE_VIRTUAL_ADDRESSING, "true")
        properties[FORCE_VIRTUAL_ADDRESSING] = virtual
        properties[PATH_STYLE_ACCESS] = "false" if virtual == "true" else "true"
        return properties


# -- remote signing (the Iceberg S3 signer API, ``POST /v1/aws/s3/sign``) ----------------------

REMOTE_SIGNING_ENABLED = "s3.remote-signing-enabled"
SIGNER = "s3.signer"
SIGNER_URI = "s3.signer.uri"
SIGNER_ENDPOINT = "s3.signer.endpoint"
SIGN_PATH = "v1/aws/s3/sign"

READ_METHODS = frozenset({"GET", "HEAD"})
WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})
# Headers the signature sets, or that name another object (a copy reads its source).
_RESIGNED = frozenset({"authorization", "x-amz-date", "x-amz-security-token",
                       "x-amz-content-sha256", "host"})
_REFUSED_HEADERS = frozenset({"x-amz-copy-source", "x-amz-copy-source-range"})


class UnsignableRequestError(ValueError):
    """A request the signer does not sign: outside the store, another object's copy, a bucket
    operation other than a listing, or a key with ``.`` or ``..`` segments."""


@dataclass(frozen=True)
class S3Target:
    """What a request to the store touches: an object (``key``), or a listing under
    ``key`` (a prefix)."""

    bucket: str
    key: str
    listing: bool = False


class RequestSigner:
    """Signs S3 requests for clients with the server's keys (``server_properties``), after the
    catalog checked the object lies in a table the caller may read (or write)."""

    def __init__(self, server_properties: Mapping[str, str],
                 client_endpoint: str | None = None) -> None:
        self._server = dict(server_properties)
        self._endpoint = client_endpoint or self._server.get(ENDPOINT)
        self._virtual = self._server.get(FORCE_VIRTUAL_ADDRESSING, "true") == "true"
        quiet_botocore()

    def client_properties(self, signer_uri: str) -> dict[str, str]:
        """What a client needs to send its requests through the signer."""
        properties = {REMOTE_SIGNING_ENABLED: "true", SIGNER: "S3V4RestSigner",
                      SIGNER_URI: signer_uri, SIGNER_ENDPOINT: SIGN_PATH,
                      FORCE_VIRTUAL_ADDRESSING: "true" if self._virtual else "false",
                      PATH_STYLE_ACCESS: "false" if self._virtual else "true"}
        if self._endpoint:
            properties[ENDPOINT] = self._endpoint
        properties[REGION] = properties[CLIENT_REGION] = self._server.get(REGION, DEFAULT_REGION)
        return properties

    def target(self, method: str, uri: str, headers: Mapping[str, Sequence[str]]) -> S3Target:
        """The bucket and key (or listed prefix) ``uri`` addresses on this store.

        Raises:
            UnsignableRequestError: see the class.
        """
        from urllib.parse import parse_qs, unquote, urlsplit

        if any(name.lower() in _REFUSED_HEADERS for name in headers):
            raise UnsignableRequestError("a copy reads another object: not signed")
        parsed = urlsplit(uri)
        if self._endpoint:
            endpoint = urlsplit(self._endpoint)
            host_ok = (parsed.scheme == endpoint.scheme and (
                parsed.netloc == endpoint.netloc if not self._virtual
                else parsed.netloc.split(".", 1)[-1] == endpoint.netloc))
            if not host_ok:
                raise UnsignableRequestError("not a request to the warehouse's store")
        path = unquote(parsed.path)
        if self._virtual:
            bucket, key = (parsed.hostname or "").split(".", 1)[0], path.lstrip("/")
        else:
            bucket, _, key = path.lstrip("/").partition("/")
        if not bucket or any(part in (".", "..") for part in key.split("/")):
            raise UnsignableRequestError("no bucket, or a key with . or .. segments")
        query = parse_qs(parsed.query, keep_blank_values=True)
        if key:
            return S3Target(bucket, key)
        if method == "GET" and not {"uploads", "delete", "location", "policy", "acl"} & set(query):
            prefix = query.get("prefix", [""])[0]
            return S3Target(bucket, prefix, listing=True)
        raise UnsignableRequestError("a bucket operation other than a listing: not signed")

    def sign(self, method: str, uri: str,
             headers: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """The request's headers, signed (SigV4) with the server's keys; the payload's hash is
        the client's ``x-amz-content-sha256`` (``UNSIGNED-PAYLOAD`` without one)."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        payload = next((", ".join(values) for name, values in headers.items()
                        if name.lower() == "x-amz-content-sha256"), "UNSIGNED-PAYLOAD")

        class _ClientPayload(S3SigV4Auth):
            def payload(self, request: Any) -> str:
                return payload

        request = AWSRequest(method=method, url=uri, headers={
            name: ", ".join(values) for name, values in headers.items()
            if name.lower() not in _RESIGNED})
        server = self._server
        _ClientPayload(Credentials(server.get(ACCESS_KEY_ID, ""),
                                   server.get(SECRET_ACCESS_KEY, ""),
                                   server.get(SESSION_TOKEN)),
                       "s3", server.get(REGION, DEFAULT_REGION)).add_auth(request)
        return {name: [value] for name, value in request.headers.items()}
