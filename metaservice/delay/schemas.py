from __future__ import annotations

from pydantic import BaseModel, Field

from metaservice.versions.schemas import TableHoldOut

HELD_BACK_BY = ("the catching-up tables (with their writers, and since when) that hold the strong "
                "cut of this table's pipeline at their floor although its other tables are exact "
                "together at a newer barrier; empty when nothing holds it")


class PercentilesOut(BaseModel):
    """Nearest-rank percentiles (observed values) over the window, in milliseconds."""

    count: int
    p50: int | None
    p95: int | None
    p99: int | None
    max: int | None


class JobDelayOut(BaseModel):
    job: str
    sources: list[str]
    sinks: list[str]
    local_lag_ms: int | None = Field(
        description="min over sources of latest − min over sinks of latest")
    recent_barrier: int | None = Field(
        description="the barrier the job finished last (in the window)")
    recent_hop_latency_ms: int | None = Field(description="hop latency of that barrier")
    hop_latency_ms: PercentilesOut


class TableDelayOut(BaseModel):
    table: str
    latest_barrier: int | None
    latest_committed_at: int | None
    lag_ms: int | None = Field(description="now − latest(T)")
    writer_job: str | None
    bottleneck_job: str | None
    held_back_by: list[TableHoldOut] = Field(default_factory=list, description=HELD_BACK_BY)
    end_to_end_latency_ms: PercentilesOut = Field(description="committed_at − barrier")


class DelayOut(BaseModel):
    now: int
    window_seconds: float
    bottleneck: JobDelayOut | None = Field(description="the worst running job overall")
    tables: list[TableDelayOut]
    jobs: list[JobDelayOut]


class HopOut(BaseModel):
    job: str
    source: str = Field(description="the source holding the job back (smallest latest)")
    sink: str
    source_latest: int | None
    sink_latest: int | None
    lag_ms: int | None = Field(description="latest(source) − latest(sink): this hop's share")
    recent_hop_latency_ms: int | None


class RootOut(BaseModel):
    table: str
    latest_barrier: int | None
    lag_ms: int | None = Field(description="now − latest(root): the ingestion's share")


class TableDelayDetailOut(BaseModel):
    table: str
    now: int
    window_seconds: float
    latest_barrier: int | None
    lag_ms: int | None
    path: list[HopOut] = Field(description="from the table up to its root: lag = root + Σ hops")
    root: RootOut | None
    bottleneck: JobDelayOut | None
    upstream_jobs: list[JobDelayOut] = Field(description="worst first")
    held_back_by: list[TableHoldOut] = Field(default_factory=list, description=HELD_BACK_BY)
    end_to_end_latency_ms: PercentilesOut
