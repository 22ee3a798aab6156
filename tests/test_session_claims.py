"""Two callers choosing the same new `chat-` id at the same moment, through the real HTTP
front-end, on SQLite and on PostgreSQL: exactly one makes the session and owns it, the other is
refused as for anyone else's session (404), and nothing of theirs lands in it — never a 500."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select
from test_http import ANN, BOB, Server, serving

from gateway.store.models import MessageRow

pytestmark = pytest.mark.timeout(120)

ROUNDS = 20
TAKEN = (200, 202)  # stored: answered, or accepted and running


def _body(session_id: str, text: str, *, with_file: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"content": text, "session_id": session_id, "wait": 0}
    if with_file:
        data = base64.b64encode(text.encode()).decode()
        body["attachments"] = [{"name": "note.txt", "mime": "text/plain", "data": data}]
    return body


async def _race(server: Server, session_id: str, *, with_file: bool) -> dict[str, int]:
    """Ann and Bob send to `session_id` at once; each one's status."""
    sent = await asyncio.gather(
        *(
            server.call(
                "POST", "/v1/send", json_body=_body(session_id, who, with_file=with_file), headers=h
            )
            for who, h in (("ann", ANN), ("bob", BOB))
        )
    )
    for status, body in sent:
        assert status in (*TAKEN, 404), body
    return {"ann": sent[0][0], "bob": sent[1][0]}


async def _owned_by_one(server: Server, session_id: str, statuses: dict[str, int]) -> None:
    assert sorted(s in TAKEN for s in statuses.values()) == [False, True], statuses
    [winner] = [who for who, status in statuses.items() if status in TAKEN]
    row = await server.runtime.store.get(session_id)
    assert row is not None and row.owner == f"http:{winner}"
    senders = await server.runtime.store.db.read(
        lambda s: list(
            s.exec(
                select(MessageRow.sender_key).where(
                    MessageRow.session_id == session_id, MessageRow.role == "user"
                )
            ).all()
        )
    )
    assert senders == [f"http:{winner}"], senders
    workspace = server.runtime.store.files(session_id).dir / "workspace"
    loser = "bob" if winner == "ann" else "ann"
    if workspace.exists():
        for path in workspace.rglob("*"):
            assert loser not in path.read_text(errors="replace") if path.is_file() else True


@pytest.mark.parametrize("with_file", [False, True], ids=["text", "attachment"])
async def test_one_of_two_callers_makes_a_new_chat_id(
    tmp_path: Path, database_url: str, with_file: bool
) -> None:
    async with serving(tmp_path, database_url=database_url) as server:
        for n in range(ROUNDS):
            session_id = f"chat-race{n}"
            statuses = await _race(server, session_id, with_file=with_file)
            await _owned_by_one(server, session_id, statuses)


async def test_one_caller_sending_twice_at_once_to_a_new_id_gets_both_in(
    tmp_path: Path, database_url: str
) -> None:
    async with serving(tmp_path, database_url=database_url) as server:
        for n in range(ROUNDS // 4):
            session_id = f"chat-twice{n}"
            sent = await asyncio.gather(
                *(
                    server.call(
                        "POST",
                        "/v1/send",
                        json_body=_body(session_id, f"ann {i}", with_file=False),
                        headers=ANN,
                    )
                    for i in range(2)
                )
            )
            assert all(status in TAKEN for status, _ in sent), sent
            row = await server.runtime.store.get(session_id)
            assert row is not None and row.owner == "http:ann"
