"""Delay (SPEC §7): table lag, job local lag, hop latency, the bottleneck, percentiles."""
