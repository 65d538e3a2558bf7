"""The pure core of the server: the exactness of docs/contract.md#exactness and the cuts built on
it, the barrier protocol's decisions, the topology graph, rollback planning and the delay formulas.

Plain Python over values: no SQLAlchemy, no FastAPI, no I/O. Everything else in the server may
import it; it imports nothing of the server (``lint-imports`` checks both).
"""
