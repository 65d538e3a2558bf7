"""HTTP only: token administration (admin role)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from metaservice.auth import service
from metaservice.auth.policy import Role
from metaservice.auth.schemas import CreatedTokenOut, TokenIn, TokenList, TokenOut
from metaservice.deps import Context, ReadSession, WriteSession

router = APIRouter(tags=["admin"])

TokenName = Annotated[str, Path(pattern=r"^[A-Za-z0-9_.:-]{1,200}$")]


@router.post("/admin/tokens", response_model=CreatedTokenOut, status_code=201,
             operation_id="create_token")
def create_token(body: TokenIn, session: WriteSession, ctx: Context) -> CreatedTokenOut:
    """Create a token. Its value is in this answer only; the server keeps its hash."""
    created = service.create_token(session, body.name, Role[body.role], ctx.clock.now_ms())
    return CreatedTokenOut(name=created.name, role=created.role.name, token=created.token,
                           created_at=created.created_at)


@router.get("/admin/tokens", response_model=TokenList, operation_id="list_tokens")
def list_tokens(session: ReadSession) -> TokenList:
    return TokenList(tokens=[TokenOut(name=t.name, role=t.role, created_at=t.created_at,
                                      revoked_at=t.revoked_at)
                             for t in service.list_tokens(session)])


@router.delete("/admin/tokens/{name}", response_model=TokenOut, operation_id="revoke_token")
def revoke_token(name: TokenName, session: WriteSession, ctx: Context,
                 request: Request) -> TokenOut:
    row = service.revoke_token(session, name, ctx.clock.now_ms())
    request.app.state.token_cache.clear()
    return TokenOut(name=row.name, role=row.role, created_at=row.created_at,
                    revoked_at=row.revoked_at)
