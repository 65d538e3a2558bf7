"""Delay (docs/contract.md#delay): table lag, job local lag, hop latency, the bottleneck,
percentiles."""
