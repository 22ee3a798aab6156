"""Canceling a task wherever it stands, over the HTTP API on a real socket: running, waiting
for a slot (every slot taken by another session), or waiting behind another task of its
session. `/cancel` and the cancel route end it and say which; a canceled task never runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clock import FakeClock
from support import wait_until
from test_http import ANN, Server, serving


@pytest.fixture
async def one_slot(tmp_path: Path) -> AsyncIterator[tuple[Server, FakeClock]]:
    clock = FakeClock()
    async with serving(tmp_path, clock, max_concurrent_tasks=1) as server:
        yield server, clock


async def send(server: Server, text: str, sid: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"content": text, "wait": 0}
    if sid:
        body["session_id"] = sid
    status, reply = await server.call("POST", "/v1/send", json_body=body, headers=ANN)
    assert status in (200, 202), reply
    return dict(reply)


async def status_of(server: Server, sid: str, task: str) -> str:
    status, view = await server.call("GET", f"/v1/session/{sid}/task/{task}", headers=ANN)
    assert status == 200, view
    return str(view["status"])


async def cancel(server: Server, sid: str, task: str) -> dict[str, Any]:
    status, reply = await server.call("POST", f"/v1/session/{sid}/cancel/{task}", headers=ANN)
    assert status == 200, reply
    return dict(reply)


async def test_cancel_ends_a_task_wherever_it_waits(one_slot: tuple[Server, FakeClock]) -> None:
    server, clock = one_slot
    busy = await send(server, "!sleep 30")
    busy_sid, busy_task = busy["session_id"], busy["task_hash"]
    await clock.until_sleeping(1, seconds=1)  # it holds the one slot
    first = await send(server, "hello")  # another session: waits for the slot
    sid = first["session_id"]
    later = await send(server, "later", sid)  # behind it, in its session's queue
    last = await send(server, "last", sid)
    assert await status_of(server, sid, first["task_hash"]) == "queued"

    stopped = await send(server, "/cancel", sid)
    assert stopped["ok"], stopped
    assert stopped["text"] == f"canceled {first['task_hash']} (it was waiting for a free slot)"
    assert await cancel(server, sid, last["task_hash"]) == {"canceled": True, "was": "queued"}
    assert await cancel(server, sid, later["task_hash"]) == {
        "canceled": True,
        "was": "waiting_for_slot",
    }
    nothing = await send(server, "/cancel", sid)
    assert (nothing["ok"], nothing["text"]) == (False, "nothing is running or waiting")

    assert await cancel(server, busy_sid, busy_task) == {"canceled": True, "was": "running"}

    async def all_ended() -> bool:
        return server.runtime.router.load() == (0, 0)

    assert await wait_until(all_ended, 10)
    again = await cancel(server, busy_sid, busy_task)
    assert again == {"canceled": False, "was": None}
    for task in (first["task_hash"], later["task_hash"], last["task_hash"]):
        assert await status_of(server, sid, task) == "canceled"
    # The slot freed, and no canceled task ran: no reply in their session.
    archived = await server.runtime.store.recent_messages(sid, 10)
    assert [m.role for m in archived] == ["user", "user", "user"]


async def test_cancel_of_the_running_task_says_so(one_slot: tuple[Server, FakeClock]) -> None:
    server, clock = one_slot
    busy = await send(server, "!sleep 30")
    await clock.until_sleeping(1, seconds=1)
    stopped = await send(server, "/cancel", busy["session_id"])
    assert stopped["text"] == f"canceled {busy['task_hash']}"  # the running one, as ever
    missing = await send(server, "/cancel nosuchtask", busy["session_id"])
    assert (missing["ok"], missing["text"]) == (False, "no task nosuchtask here")
