"""Operations: Prometheus metrics (``/metrics``)."""
