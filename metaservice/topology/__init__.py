"""The topology formed by running jobs: reading it, its lock and its per-process cache
(``repository.py``); the graph itself (table → job → table) is pure, ``core/graph.py``."""
