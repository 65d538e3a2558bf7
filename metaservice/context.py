"""What every service call needs besides its session: the clock, the settings, caches."""

from __future__ import annotations

from dataclasses import dataclass, field

from metaservice.clock import Clock, SystemClock
from metaservice.lineage.openlineage import Naming
from metaservice.settings import Settings
from metaservice.topology.repository import TopologyCache


@dataclass
class ServiceContext:
    settings: Settings
    clock: Clock = field(default_factory=SystemClock)
    topology_cache: TopologyCache = field(default_factory=TopologyCache)
    # How OpenLineage events are named; None when OpenLineage is not configured (no events).
    lineage: Naming | None = None
