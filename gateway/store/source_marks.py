"""Where reading a platform's backlog starts: for each session of a kind, the delivery key of
the newest message it archived from that platform (its `source_key`)."""

from __future__ import annotations

from sqlmodel import Session, col, select

from gateway.store.db import Database
from gateway.store.models import MessageRow, SessionRow


async def latest_sources(db: Database, session_prefix: str, key_prefix: str) -> dict[str, str]:
    """`{session id: source key}` for the sessions whose ids start with `session_prefix`, of
    the newest message (by archive id) whose key starts with `key_prefix`; a session without
    one is left out."""

    def work(session: Session) -> dict[str, str]:
        ids = session.exec(
            select(SessionRow.id).where(col(SessionRow.id).startswith(session_prefix))
        ).all()
        found: dict[str, str] = {}
        for session_id in ids:
            # One short walk back along the (session_id, id) index per session.
            newest = session.exec(
                select(MessageRow.source_key)
                .where(MessageRow.session_id == session_id)
                .where(col(MessageRow.source_key).startswith(key_prefix))
                .order_by(col(MessageRow.id).desc())
                .limit(1)
            ).first()
            if newest:
                found[session_id] = newest
        return found

    return await db.read(work)
