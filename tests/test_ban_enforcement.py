"""A ban ends what the member already started, through the fake platforms with the real
clients and through a real gateway process over HTTP: their running and waiting tasks are
canceled (audited as a cancel, by the ban), the prompt of a canceled task closes with it, and a
banned member's press or answer on any prompt where the ban holds is refused."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, ClientTimeout
from chat_drivers import (
    ANN,
    BOB,
    CY,
    DEE,
    DRIVERS,
    A,
    ChatDriver,
    nth_prompt,
    said_with,
    task_of,
)
from gateway_proc import Gateway, free_port
from support import wait_until
from test_bans import key, make_chat_admin
from test_http import bearer, write_tokens

from gateway.store.bans import EVERYWHERE

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(params=["telegram", "discord"])
async def platform(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ChatDriver]:
    async with DRIVERS[request.param](tmp_path / "home") as driver:
        yield driver


async def test_a_chat_ban_cancels_the_members_running_and_waiting_tasks_at_once(
    platform: ChatDriver,
) -> None:
    make_chat_admin(platform, CY)
    await platform.start()
    router = platform.runtime.router
    sid = platform.session_id(A)
    platform.post(A, BOB, "!confirm launch")
    prompt = await nth_prompt(platform, A)
    running = await task_of(platform, A)
    platform.post(A, BOB, "waiting behind it")

    async def queued() -> bool:
        return router.queue_length(sid) == 1

    assert await wait_until(queued)
    waiting = await task_of(platform, A)
    assert waiting != running

    platform.post(A, CY, f"/ban {BOB.id}")
    await said_with(platform, A, f"banned {key(platform, BOB)}")
    # Canceled by the time the ban is confirmed: each is winding down, or ended.
    bobs = [t for t in router.live_tasks() if t.origin.sender_key == key(platform, BOB)]
    assert all(t.events and t.events[-1].kind == "canceled" for t in bobs), bobs
    for task_hash in (running, waiting):
        assert (await router.wait(task_hash, 10)).status == "canceled"
    log = platform.runtime.store.files(sid).action_log.path.read_text()
    canceled = [line for line in log.splitlines() if "[canceled]" in line and "ban (" in line]
    assert len(canceled) == 2, log
    assert all(f"by {key(platform, CY)}" in line for line in canceled)

    # The prompt went with its task: bob's press approves nothing.
    pressed = await platform.press(prompt, "Approve", BOB)
    assert not pressed.accepted
    platform.post(A, ANN, "still served")
    await said_with(platform, A, "echo: still served")
    assert not any(s.text.startswith("approved:") for s in platform.said(A))


async def test_an_admin_banned_everywhere_answers_no_prompt(platform: ChatDriver) -> None:
    await platform.start()
    bans = platform.runtime.bans
    assert bans is not None
    platform.post(A, CY, "!confirm ship")
    prompt = await nth_prompt(platform, A)
    await bans.ban(EVERYWHERE, key(platform, DEE), by="terminal:operator")
    refused = await platform.press(prompt, "Approve", DEE)  # a gateway admin, banned
    assert not refused.accepted and "banned" in refused.told
    # Cy's task is not theirs: it goes on, and its requester answers.
    assert (await platform.press(prompt, "Deny", CY)).accepted
    await said_with(platform, A, "denied: ship")


async def test_the_operators_ban_ends_a_token_users_task_in_a_running_gateway(
    tmp_path: Path,
) -> None:
    """`agenvoy ban` is another process: the gateway finds the ban within a second and
    cancels the task; the banned caller's answer is refused with 403 `banned`."""
    home = tmp_path / "home"
    write_tokens(home / ".store", {"bob": "Bob", "root": "Root"})
    gateway = Gateway(
        home, free_port(), AGENVOY_CONFIRM_TIMEOUT_SECONDS="120", AGENVOY_ADMINS="http:root"
    )
    try:
        await gateway.start()
        async with ClientSession(timeout=ClientTimeout(total=20)) as client:

            async def call(
                method: str, path: str, user: str, body: object = None
            ) -> tuple[int, Any]:
                async with client.request(
                    method, gateway.url + path, json=body, headers=bearer(user)
                ) as resp:
                    return resp.status, await resp.json()

            status, sent = await call(
                "POST", "/v1/send", "bob", {"content": "!confirm wipe", "persist": True, "wait": 5}
            )
            assert status == 202 and isinstance(sent, dict), sent
            assert sent["status"] == "waiting", sent
            sid, task = sent["session_id"], sent["task_hash"]
            ban = await asyncio.create_subprocess_exec(
                gateway.exe,
                "ban",
                "http:bob",
                env={**os.environ, "AGENVOY_HOME": str(home)},
                stdout=asyncio.subprocess.DEVNULL,
            )
            assert await ban.wait() == 0

            async def canceled() -> bool:
                status, state = await call("GET", f"/v1/session/{sid}/task/{task}", "root")
                return status == 200 and isinstance(state, dict) and state["status"] == "canceled"

            assert await wait_until(canceled, within=5)
            status, refused = await call(
                "POST", f"/v1/session/{sid}/pending/{task}", "bob", {"approve": True}
            )
            assert isinstance(refused, dict), refused
            assert (status, refused["error"]["code"]) == (403, "banned"), refused
        await gateway.stop()
    finally:
        await gateway.close()
