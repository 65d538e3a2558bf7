from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,200}$")
    role: Literal["reader", "writer", "admin"]


class TokenOut(BaseModel):
    name: str
    role: str
    created_at: int
    revoked_at: int | None = None


class CreatedTokenOut(TokenOut):
    token: str = Field(description="shown once; only its hash is stored")


class TokenList(BaseModel):
    tokens: list[TokenOut]
