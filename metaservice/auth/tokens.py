"""Bearer tokens: created once (printed once), stored only as a SHA-256 hash.

Tokens are 256-bit random strings, so a fast hash is enough: there is nothing to brute-force.
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "mst_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
