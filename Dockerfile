# MetaService server image: slim Python, non-root, migrations at start, HEALTHCHECK on /healthz.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY metaservice ./metaservice
COPY spark_plugin ./spark_plugin
COPY metaservice_demo ./metaservice_demo
COPY metaservice_soak ./metaservice_soak
COPY metaservice_names ./metaservice_names
COPY migrations ./migrations
RUN pip install --no-cache-dir --upgrade pip \
 && pip wheel --no-cache-dir --wheel-dir /wheels '.[server]'

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    METASERVICE_HOST=0.0.0.0 \
    METASERVICE_PORT=8000 \
    METASERVICE_AUTH=required \
    METASERVICE_DATABASE_URL=sqlite:////data/metaservice.db
RUN groupadd --system --gid 10001 metaservice \
 && useradd --system --uid 10001 --gid metaservice --home-dir /data --create-home metaservice
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels 'metaservice[server]' \
 && rm -rf /wheels
USER metaservice
WORKDIR /data
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('METASERVICE_PORT', '8000')}/healthz\", timeout=2)"]
# `serve` migrates the database to the newest revision, then serves (use --no-migrate when a
# separate migration job runs first, as in deploy/k8s).
ENTRYPOINT ["metaservice"]
CMD ["serve"]
