"""Benchmarks of MetaService against the baselines its goals name.

Run ``python -m benchmarks all`` (or a name; ``--quick`` for small data sets). A benchmark is a
module ``benchmarks/<name>.py`` exposing ``run(quick: bool) -> list[Result]``
(``benchmarks._report.Result``); shared set-up lives in ``benchmarks._environment``.
"""
