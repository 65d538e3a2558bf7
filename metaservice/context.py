"""What every service call needs besides its session: the clock, the settings, caches."""

from __future__ import annotations

from dataclasses import dataclass, field

from metaservice.clock import Clock, SystemClock
from metaservice.openlineage import Naming
from metaservice.repositories.topology import TopologyCache
from metaservice.settings import Settings


@dataclass
class ServiceContext:
    settings: Settings
    clock: Clock = field(default_factory=SystemClock)
    topology_cache: TopologyCache = field(default_factory=TopologyCache)
    # How OpenLineage events are named; None when OpenLineage is not configured (no events).
    lineage: Naming | None = None
