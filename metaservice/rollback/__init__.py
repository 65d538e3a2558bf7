"""Rollback plans (docs/contract.md#rollback-plans): which tables go back to which snapshot, which
barriers become invalid, which jobs restart; applying a plan, fencing the tables until Iceberg has
followed."""
