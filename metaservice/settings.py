"""Configuration, read once from the environment (prefix ``METASERVICE_``)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///metaservice.db"


class Settings(BaseSettings):
    """Every knob of the server. Unknown variables with the prefix are ignored."""

    model_config = SettingsConfigDict(env_prefix="METASERVICE_", extra="ignore")

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


@lru_cache
def get_settings() -> Settings:
    return Settings()
