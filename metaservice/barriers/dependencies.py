"""The dependency that hands an endpoint its process's committer of root reports
(``group_commit.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from metaservice.barriers.group_commit import RootReportCommitter


async def get_root_reports(request: Request) -> RootReportCommitter:
    return request.app.state.root_reports


RootReports = Annotated[RootReportCommitter, Depends(get_root_reports)]
