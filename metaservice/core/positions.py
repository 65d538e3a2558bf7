"""What the barrier protocol answers a job (``start``, ``next``), and the barrier the server
assigns when a root table's report or a source-less job's commit names none.

Value types shared by the barrier protocol, the jobs' rules and the wire schemas: they sit here,
beneath all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Action = Literal["process", "wait", "abort", "none"]


@dataclass
class Position:
    """An answer of ``start`` or ``next``."""

    action: Action
    barrier: int | None = None
    snapshots: dict[str, int] = field(default_factory=dict)
    previous: dict[str, int] | None = field(default_factory=dict)
    retry_after_ms: int | None = None
    reason: str | None = None
    restart_after: int | None = None  # with an abort caused by a rollback
