"""The packages of the distribution (everything else is in pyproject.toml).

The Alembic revisions live at the repository's top level, ``migrations/``; the wheel carries
them inside the server's package, as ``metaservice/_migrations/``, rather than as a top-level
``migrations`` package of their own. ``metaservice.db.migrate`` finds them in either place.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["metaservice", "metaservice.*",
                                      "spark_plugin", "spark_plugin.*",
                                      "metaservice_demo", "metaservice_demo.*",
                                      "metaservice_soak", "metaservice_soak.*",
                                      "metaservice_names"]),
              "metaservice._migrations", "metaservice._migrations.versions"],
    package_dir={"metaservice._migrations": "migrations"},
)
