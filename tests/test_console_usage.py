"""The console's usage page per member and per shared chat, in Chromium: a gateway admin sees
everyone's, with what it cost where a price table is set; a member sees their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.telegram import FakeTelegram
from telegram_rig import running as telegram_running
from test_console import console, sign_in, with_tokens

from gateway.store.usage import UsageRecord

pytestmark = pytest.mark.timeout(180)


async def test_usage_per_member_and_per_chat(browser: Any, tmp_path: Path) -> None:
    home = with_tokens(tmp_path / "home")
    prices = tmp_path / "prices.toml"
    prices.write_text('"gpt-a" = { input = 1, output = 2 }\n')
    async with (
        FakeTelegram() as fake,
        telegram_running(fake, home, admins="http:root", prices=prices) as rig,
        console(rig.runtime) as base,
    ):
        usage = rig.runtime.store.usage
        spent = [
            ("tg--500", "telegram:41", 1_000, 500, 0.5),
            ("tg--500", "telegram:42", 2_000, 1_000, 1.25),
            ("dc-77", "telegram:41", 10, 5, 0.01),
            ("cli-mine", "http:ann", 300, 100, 0.02),
        ]
        for session_id, identity, inp, out, cost in spent:
            row = UsageRecord(session_id, "gpt-a", inp, out, identity=identity, cost=cost)
            await usage.record(row)

        page = await sign_in(browser, base, "root")
        await page.get_by_role("link", name="Usage").click()
        members = await page.locator("table.per-member").inner_text()
        assert "telegram:42\t1\t2,000\t1,000\t$1.25" in members
        assert "telegram:41\t2\t1,010\t505\t$0.51" in members
        assert "http:ann\t1\t300\t100\t$0.02" in members
        chats = page.locator("table.per-chat")
        rows = (await chats.inner_text()).splitlines()[1:]
        assert rows == ["tg--500\t2\t3,000\t1,500\t$1.75", "dc-77\t1\t10\t5\t$0.01"]
        assert await chats.get_by_role("link", name="tg--500").get_attribute("href") == (
            "/ui/session/tg--500"
        )

        # A member sees what was spent for them alone, and no chat's spend but their own there.
        page = await sign_in(browser, base, "ann")
        await page.get_by_role("link", name="Usage").click()
        members = await page.locator("table.per-member").inner_text()
        assert "http:ann" in members and "telegram:4" not in members
        assert await page.locator("table.per-chat").count() == 0
        assert "Nothing spent in a shared chat" in await page.locator("main").inner_text()
