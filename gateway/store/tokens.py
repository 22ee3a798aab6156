"""The per-user API tokens' rows (migration 0023): only each token's SHA-256, with who it
stands for and who issued it. Every issue and revocation is logged in `config_change` (kind
`token`, the token known there only by the start of its hash) in the same transaction, and the
newest such log number is the stamp every instance polls to see a change
(gateway/credentials.py). A home's `api_tokens.json` from before is imported once.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, delete, select
from sqlmodel import Field, Session, SQLModel, col

from gateway.credentials import IssuedToken, TokenRefused, load_tokens, tokens_path
from gateway.store.config_changes import record
from gateway.store.db import Database
from gateway.store.lean import Lean

_STAMP_SQL = "SELECT MAX(id) FROM config_change WHERE kind = 'token'"
IMPORTED_SUFFIX = ".imported"


class ApiTokenRow(SQLModel, table=True):
    __tablename__ = "api_token"

    name: str = Field(primary_key=True, max_length=64)
    display: str = Field(max_length=64)
    digest: str = Field(max_length=64, unique=True)
    issued_by: str = Field(default="", max_length=200)
    issued_at: int = Field(default=0, sa_type=BigInteger)


def _logged(row: ApiTokenRow | IssuedToken) -> dict[str, Any]:
    # Enough to tell two tokens of one name apart, never enough to find the token.
    return {"display": row.display, "sha256_prefix": row.digest[:12]}


def _issued(row: ApiTokenRow) -> IssuedToken:
    return IssuedToken(row.name, row.display, row.digest)


class TokenStore:
    """The repository of issued tokens; what `Credentials` reads (its `TokenSource`)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def stamp(self) -> int:
        """The newest token change's number: unchanged while no token was issued or revoked."""

        def work(sql: Lean) -> int:
            return int(sql.value(_STAMP_SQL) or 0)

        return await self._db.read_lean(work)

    async def load(self) -> list[IssuedToken]:
        def work(session: Session) -> list[IssuedToken]:
            rows = session.scalars(select(ApiTokenRow).order_by(col(ApiTokenRow.name))).all()
            return [_issued(row) for row in rows]

        return await self._db.read(work)

    async def issue(self, token: IssuedToken, *, by: str, at: int) -> None:
        """Keep `token` (its hash); TokenRefused when its name has one already."""

        def work(session: Session) -> None:
            if session.get(ApiTokenRow, token.name) is not None:
                raise TokenRefused(f"{token.name!r} has a token already; remove it first")
            row = ApiTokenRow(
                name=token.name,
                display=token.display,
                digest=token.digest,
                issued_by=by,
                issued_at=at,
            )
            session.add(row)
            record(session, "token", token.name, None, _logged(row), by=by, at=at)

        await self._db.write(work)

    async def revoke(self, name: str, *, by: str, at: int, reverts: int | None = None) -> bool:
        """Forget `name`'s token; False when it has none."""

        def work(session: Session) -> bool:
            row = session.get(ApiTokenRow, name)
            if row is None:
                return False
            record(session, "token", name, _logged(row), None, by=by, at=at, reverts=reverts)
            stmt = delete(ApiTokenRow).where(col(ApiTokenRow.name) == name)
            session.connection().execute(stmt)
            return True

        return await self._db.write(work)

    async def import_file(self, store_dir: Path, *, at: int) -> int:
        """Take in the tokens of a home's `api_tokens.json` (the names the archive does not
        have yet), then rename the file so that a token revoked since is not taken in again.
        How many were taken in."""
        path = tokens_path(store_dir)
        found = await asyncio.to_thread(load_tokens, path)
        if not found and not await asyncio.to_thread(path.exists):
            return 0
        by = f"import:{path.name}"

        def work(session: Session) -> int:
            taken = 0
            for token in found:
                clash = session.scalars(
                    select(ApiTokenRow).where(
                        (col(ApiTokenRow.name) == token.name)
                        | (col(ApiTokenRow.digest) == token.digest)
                    )
                ).first()
                if clash is not None:
                    continue
                session.add(
                    ApiTokenRow(
                        name=token.name,
                        display=token.display,
                        digest=token.digest,
                        issued_by=by,
                        issued_at=at,
                    )
                )
                record(session, "token", token.name, None, _logged(token), by=by, at=at)
                taken += 1
            return taken

        taken = await self._db.write(work)
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(path.replace, path.with_name(path.name + IMPORTED_SUFFIX))
        return taken
