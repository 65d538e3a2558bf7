"""The barrier history as stored: ``repository.py`` reads the barrier rows (``snap(T, B)``,
each table's newest rows, the first change after a barrier), ``service.py`` serves them as
:class:`~metaservice.core.exactness.History` to whoever decides on them (versions, the barrier
protocol, retention)."""
