"""Configuration, read once from the environment (prefix ``METASERVICE_``)."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///metaservice.db"


class Settings(BaseSettings):
    """Every knob of the server. Unknown variables with the prefix are ignored."""

    # populate_by_name: the fields read from the AWS variables (validation_alias) are given by
    # their own names too, as every other field is.
    model_config = SettingsConfigDict(env_prefix="METASERVICE_", extra="ignore",
                                      populate_by_name=True)

    database_url: str = Field(
        default=DEFAULT_DATABASE_URL,
        description="SQLAlchemy URL: sqlite:///file.db (embedded) or postgresql+psycopg://…",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    planned_job_ttl_seconds: float = Field(default=3600.0, gt=0)
    sqlite_busy_timeout_ms: int = Field(default=30_000, ge=0)
    wait_retry_after_ms: int = Field(default=500, ge=1)
    log_level: str = "info"
    log_format: Literal["text", "json"] = Field(
        default="text", description="json: one JSON object per line, event fields as keys")
    auth: Literal["required", "disabled"] = Field(
        default="disabled",
        description="bearer tokens with roles; may be disabled only on a loopback address")
    admin_token: SecretStr | None = Field(
        default=None, description="a bootstrap admin token (its hash is stored at start)")
    max_body_bytes: int = Field(default=1_048_576, ge=1024,
                                description="larger request bodies are refused with 413")
    lean_routes: bool = Field(
        default=True,
        description="answer the hot routes (root reports, next, commits, POST /versions, the "
                    "catalog's loads and commits) without FastAPI's per-request routing and "
                    "dependency solving (metaservice/lean_routes.py); false gives the same "
                    "answers through FastAPI alone")
    rate_limit_per_second: float = Field(
        default=0.0, ge=0, description="per token (or client address); 0 turns it off")
    rate_limit_burst: int = Field(default=100, ge=1)
    max_barrier_ahead_seconds: float = Field(
        default=86_400.0, gt=0, le=100 * 365 * 86_400,  # far below 2^63 ms: no overflow
        description="barriers further ahead of the server's clock are refused (barrier_in_future)")
    warehouse: str = Field(
        default="./warehouse",
        description="where the Iceberg catalog writes table metadata and data: a local directory "
                    "(created on demand) or any location pyiceberg's FileIO reaches (s3://…)")
    allowed_locations: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="locations besides the warehouse where the catalog's tables may live, "
                    "comma-separated (s3://bucket/prefix, /data/lake): every location the "
                    "server writes, reads or deletes lies inside the warehouse or one of these")
    max_metadata_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1024,
        description="a metadata file larger than this is not read (register, loads)")
    metadata_read_seconds: float = Field(
        default=30.0, gt=0, le=3600,
        description="a metadata file not read within this time fails its request (503)")
    metadata_cache_bytes: int = Field(
        default=64 * 1024 * 1024, ge=0,
        description="the JSON of the metadata files the catalog answers with (tables' heads, "
                    "read sessions' cut files) is kept in memory up to this many bytes in all, "
                    "per process: a metadata file never changes, so a load is its pointer "
                    "lookup and these bytes; 0 keeps none")
    idempotency_key_seconds: float = Field(
        default=1800.0, ge=60, le=7 * 86_400,
        description="how long the catalog answers a retried mutation's Idempotency-Key with its "
                    "first outcome (advertised in /iceberg/v1/config)")
    max_read_sessions: int = Field(
        default=64, ge=1,
        description="live read sessions of the catalog's consistent warehouses (lake@strong) "
                    "per principal; one more is refused (429 too_many_read_sessions)")
    max_leases: int = Field(
        default=1000, ge=1,
        description="live snapshot leases (POST /leases, POST /versions with lease_seconds) per "
                    "principal; one more is refused (429 too_many_leases) until one is released "
                    "or expires. A read session's lease counts against max_read_sessions instead")
    max_lease_seconds: float = Field(
        default=86_400.0, gt=0, le=7 * 86_400,
        description="the longest term a lease is granted or renewed for; a longer ttl_seconds "
                    "or lease_seconds is refused (422 lease_term_too_long): a reader that needs "
                    "longer renews its lease")
    catalog_name: str = Field(
        default="lake", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$",
        description="the Iceberg catalog's warehouse name, the first part of every table name")
    keep_alive_seconds: int = Field(
        default=75, ge=1, le=3600,
        description="idle HTTP connections are kept this long: Iceberg REST clients (pyiceberg's, "
                    "with no retry) reuse pooled connections, and one closed by the server as "
                    "it is reused fails a job's request with 'connection reset' (uvicorn's "
                    "default is 5 s)")
    public_url: str | None = Field(
        default=None, pattern=r"^https?://[^\s]+$",
        description="the URL clients reach this server at, for the names it gives out "
                    "(OpenLineage events name its Iceberg catalog and facet schema by it); "
                    "default http://<host>:<port>")
    lineage_sender: Literal["thread", "none"] = Field(
        default="thread",
        description="when OpenLineage is configured, who delivers the events the server "
                    "writes: `thread`, a background thread of each server process; `none`, "
                    "nobody in the server: `metaservice lineage-send` delivers them in a "
                    "process of its own (the client's work then never competes with requests "
                    "for the server's interpreter)")
    lineage_poll_seconds: float = Field(
        default=0.5, gt=0, le=60,
        description="when OpenLineage is configured: how often an idle sender looks for "
                    "events to deliver")
    lineage_claim_seconds: float = Field(
        default=30.0, gt=0, le=3600,
        description="a sender's claim on the events it is delivering: a crashed server's "
                    "events are delivered by another (or by it, restarted) once it lapses")
    lineage_max_backoff_seconds: float = Field(
        default=60.0, gt=0, le=3600,
        description="the longest wait before an event whose delivery failed is tried again "
                    "(1 s, doubling up to this)")
    purge_page_size: int = Field(
        default=1000, ge=1, le=1000,
        description="a purge lists and deletes a dropped table's files this many at a time "
                    "(one ListObjectsV2 and one DeleteObjects per page on S3, whose limit is "
                    "1000); its claim on the purge is extended before each page")
    purge_answer_seconds: float = Field(
        default=5.0, ge=0, le=300,
        description="a drop with purge answers once its purge finished, or after this long, "
                    "whichever comes first (the rest goes on after the answer): a table of a "
                    "few thousand files is gone when the answer comes, and a create at its "
                    "location right after the drop succeeds; 0 answers at once")
    purge_claim_seconds: float = Field(
        default=60.0, gt=0, le=3600,
        description="how long a server process holds a purge without extending its claim: "
                    "a purge a crashed or stopped server left is finished by another server "
                    "process, or by it restarted, once its claim lapsed")
    purge_poll_seconds: float = Field(
        default=10.0, gt=0, le=3600,
        description="how often each server process looks for purges whose claim lapsed (and "
                    "once at its start)")
    scan_plan_seconds: float = Field(
        default=600.0, gt=0, le=86_400,
        description="a scan plan of the catalog (server-side scan planning) lives this long; "
                    "its planned snapshots are leased as long, or until DELETE …/plan/{plan-id}")
    max_scan_plans: int = Field(
        default=256, ge=1,
        description="live scan plans per principal; one more is refused (429 "
                    "too_many_scan_plans) until one is cancelled (DELETE …/plan/{plan-id}) or "
                    "expires")
    scan_plan_files_per_task: int = Field(
        default=1000, ge=1, le=100_000,
        description="file scan tasks per answer of a scan plan: a plan of more files is answered "
                    "as plan tasks of at most this many, fetched with POST …/tasks")
    read_session_seconds: float = Field(
        default=3600.0, gt=0, le=30 * 86_400,
        description="a read session of a consistent warehouse (lake@strong) lasts this long "
                    "after its last use, and leases the snapshots it served as long")

    # -- the object store (docs/operations.md#the-lake-on-object-storage) -----------------------
    # Read as AWS's own tools read them; never logged (the secrets are SecretStr).
    aws_access_key_id: str | None = Field(
        default=None, validation_alias=AliasChoices("AWS_ACCESS_KEY_ID"),
        description="AWS_ACCESS_KEY_ID: the key the server reads and writes s3:// locations with")
    aws_secret_access_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("AWS_SECRET_ACCESS_KEY"),
        description="AWS_SECRET_ACCESS_KEY")
    aws_session_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("AWS_SESSION_TOKEN"),
        description="AWS_SESSION_TOKEN, with temporary credentials")
    aws_region: str | None = Field(
        default=None,
        validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION"),
        description="AWS_REGION (or AWS_DEFAULT_REGION); us-east-1 when an endpoint is set and "
                    "no region is")
    aws_endpoint_url: str | None = Field(
        default=None, pattern=r"^https?://[^\s]+$",
        validation_alias=AliasChoices("AWS_ENDPOINT_URL_S3",
                                      "AWS_ENDPOINT_URL"),
        description="AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL: an S3 server other than AWS's "
                    "(SeaweedFS, MinIO, Ceph, …)")
    s3_path_style: bool | None = Field(
        default=None,
        description="address buckets in the path (http://endpoint/bucket/key) rather than in "
                    "the host name; default: path-style when AWS_ENDPOINT_URL is set, "
                    "virtual-hosted on AWS")
    storage_properties: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="FileIO properties by location, as JSON: {\"s3://bucket/prefix\": "
                    "{\"s3.endpoint\": …, \"s3.region\": …}}; a location's properties are the "
                    "AWS variables' overlaid with those of every entry it lies under, the "
                    "longest last (pyiceberg's names: s3.endpoint, s3.access-key-id, "
                    "s3.secret-access-key, s3.session-token, s3.region, "
                    "s3.force-virtual-addressing)")
    storage_secret_file: str | None = Field(
        default=None,
        description="a JSON file shaped as METASERVICE_STORAGE_PROPERTIES, read at start and "
                    "overlaid on it: the store's secrets kept out of the environment (a mounted "
                    "Kubernetes secret, say)")
    storage_connect_seconds: float = Field(
        default=5.0, gt=0, le=600,
        description="a connection to the object store not made within this time fails its "
                    "request: 503 object_store_unavailable, with Retry-After")
    storage_request_seconds: float = Field(
        default=20.0, gt=0, le=3600,
        description="an object store's answer not received within this time fails its "
                    "request: 503 object_store_unavailable, with Retry-After")

    vended_credentials_role_arn: str | None = Field(
        default=None, min_length=1, max_length=2048,
        description="the role the server assumes (STS AssumeRole, with a session policy "
                    "narrowing it to one table's prefixes, read-only for readers) to vend "
                    "credentials to clients that send X-Iceberg-Access-Delegation: "
                    "vended-credentials; unset: none are vended (clients use their own)")
    vended_credentials_seconds: int = Field(
        default=3600, ge=900, le=43_200,
        description="the lifetime asked of STS for vended credentials (STS's bounds: 900 s "
                    "to 12 h; the store may cut it shorter, and the answer says when they end)")
    remote_signing: bool = Field(
        default=False,
        description="serve the Iceberg S3 signer (POST /iceberg/v1/aws/s3/sign): clients asking "
                    "for access delegation, when no credentials are vended (no role, or STS "
                    "failed), are told to have each request signed by the catalog, which signs "
                    "only requests inside a table the caller may read, or write")
    sts_endpoint: str | None = Field(
        default=None, pattern=r"^https?://[^\s]+$",
        description="where STS answers; default: the store's endpoint (AWS_ENDPOINT_URL: "
                    "SeaweedFS, MinIO and Ceph serve STS there), or AWS's STS")
    vended_endpoint: str | None = Field(
        default=None, pattern=r"^https?://[^\s]+$",
        description="the store's endpoint as clients reach it, given with vended credentials; "
                    "default: the server's (AWS_ENDPOINT_URL)")

    @field_validator("allowed_locations", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("database_url")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        scheme = value.split(":", 1)[0]
        if not (scheme.startswith("sqlite") or scheme.startswith("postgresql")):
            raise ValueError(
                f"unsupported database URL scheme {scheme!r}: use sqlite:///path.db "
                "or postgresql+psycopg://user@host/db"
            )
        if scheme == "postgresql" or scheme == "postgres":
            # Only the psycopg (v3) driver is installed: pick it for a bare URL.
            value = "postgresql+psycopg:" + value.split(":", 1)[1]
        return value


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@lru_cache
def get_settings() -> Settings:
    return Settings()
