"""The chaos soak (``metaservice-soak``, ``python -m metaservice_soak``): a real pipeline of
separate processes — ingestion into two roots, Spark jobs on a standalone cluster, readers of
several engines checking a cross-table invariant — run for minutes while Spark drivers, server
processes and the database are killed, then checked row by row; its report goes into
``docs/reliability.md``.

An application of the distribution, outside it: it starts servers as an operator does
(``metaservice serve``, behind haproxy on PostgreSQL) and uses the plugin's public API.
``metaservice`` never imports it.
"""
