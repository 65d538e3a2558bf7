"""The path parameters the endpoints share, as FastAPI types: each validates a URL segment
with the pattern of its value object (``metaservice/names.py``) and documents it in OpenAPI."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path
from pydantic import AfterValidator

from metaservice.names import JOB_ID_PATTERN, check_part, check_stored_namespace
from metaservice.schemas import INT64_MAX, TextInt

CatalogPath = Annotated[str, Path(description="Iceberg catalog name"), AfterValidator(check_part)]
DatabasePath = Annotated[str, Path(
    description="database (namespace): its levels joined by the unit separator (%1F), as "
                "the Iceberg REST specification writes a namespace in a URL"),
    AfterValidator(check_stored_namespace)]
TablePath = Annotated[str, Path(description="table name (percent-encoded)"),
                      AfterValidator(check_part)]
JobPath = Annotated[str, Path(pattern=JOB_ID_PATTERN, description="job id chosen by the client")]
BarrierPath = Annotated[TextInt, Path(ge=0, le=INT64_MAX)]
