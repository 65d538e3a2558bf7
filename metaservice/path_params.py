"""The path parameters the endpoints share, as FastAPI types: each validates a URL segment
with the pattern of its value object (``metaservice/names.py``) and documents it in OpenAPI."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from metaservice.names import JOB_ID_PATTERN, NAME_PART_PATTERN
from metaservice.schemas import INT64_MAX, TextInt

CatalogPath = Annotated[str, Path(pattern=NAME_PART_PATTERN, description="Iceberg catalog name")]
DatabasePath = Annotated[str, Path(pattern=NAME_PART_PATTERN, description="database (namespace)")]
TablePath = Annotated[str, Path(pattern=NAME_PART_PATTERN, description="table name")]
JobPath = Annotated[str, Path(pattern=JOB_ID_PATTERN, description="job id chosen by the client")]
BarrierPath = Annotated[TextInt, Path(ge=0, le=INT64_MAX)]
