"""The built-in Apache Iceberg REST catalog (docs/contract.md#the-built-in-catalog), served under
``/iceberg``.

By concept, each with its routes (HTTP only) and its rules:

- configuration and namespaces: ``namespace_endpoints.py``, ``namespaces.py``;
- tables (list, load, create, register, drop, rename): ``table_endpoints.py``, ``tables.py``;
- commits: ``commit_endpoints.py``, ``commits.py`` (staging with pyiceberg, the pointer swap),
  ``commit_rules.py`` (the trust rules, and the barrier, expiration and rollback services a
  commit completes), ``changes.py`` (pure: the staged commit and what it changes);
- Iceberg views: ``sql_view_endpoints.py``, ``sql_view_service.py``, ``sql_views.py`` (pure),
  ``sql_view_repository.py``;
- consistent warehouses and their read sessions: ``read_session_endpoints.py``,
  ``read_sessions.py``, ``consistent_warehouses.py`` (pure).

Shared: ``site.py`` (the catalog's identity and name rules), ``claims.py`` (a table's uuid and
the locations it claims), ``owners.py`` (who acts for a running job), ``requests.py`` (the typed
request bodies), ``http.py`` (route helpers and the Iceberg error renderer), ``endpoints.py``
(mounts it all), ``validation.py`` (pure: input that makes no valid table), ``storage.py``
(metadata files in the warehouse), ``repository.py`` (namespace rows and table pointers),
``errors.py`` (the Iceberg error model), ``idempotency.py``, ``pages.py``, ``schemas.py``.
"""
