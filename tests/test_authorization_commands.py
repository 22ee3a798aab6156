"""Who may run which chat command in a shared chat, as one table: every command the gateway
registers, typed in a Telegram chat by a member, by an admin of that chat (as the platform
vouches) and by a gateway admin. The HTTP and MCP side is tests/test_authorization.py.

Each command is written once with who may run it; a command registered without a row, or one
whose rule loosens, fails here.
"""

from __future__ import annotations

from typing import Final

import pytest
from engine_rig import EngineRig

from gateway.events import Inbound, Origin

pytestmark = pytest.mark.fast

CHAT: Final = "tg-5"
CALLERS: Final = {
    "chat member": Origin("telegram", CHAT, sender_id="11", sender_name="Member"),
    "chat admin": Origin("telegram", CHAT, sender_id="12", sender_name="Mod", is_admin=True),
    "gateway admin": Origin("telegram", CHAT, sender_id="13", sender_name="Op"),
}
EVERYONE: Final = frozenset(CALLERS)
ADMINS: Final = frozenset({"chat admin", "gateway admin"})
# Every command: what it is typed with, and who may run it in a shared chat. `/new` exists
# only in the terminal; `/cancel` of another's task is refused by the requester rule, which
# the prompt tests hold.
COMMANDS: Final[dict[str, tuple[str, frozenset[str]]]] = {
    "help": ("/help", EVERYONE),
    "status": ("/status", EVERYONE),
    "cancel": ("/cancel", EVERYONE),
    "schedules": ("/schedules", EVERYONE),
    "usage": ("/usage me", EVERYONE),
    "link": ("/link", EVERYONE),
    "unlink": ("/unlink", EVERYONE),
    "export_me": ("/export_me", EVERYONE),
    "forget_me": ("/forget_me", EVERYONE),
    "model": ("/model", EVERYONE),  # alone it only shows the model
    "persona": ("/persona", EVERYONE),
    "reasoning": ("/reasoning", EVERYONE),
    "allow": ("/allow", EVERYONE),
    "queue": ("/queue", EVERYONE),
    "reset": ("/reset", ADMINS),
    "forget": ("/forget", ADMINS),  # alone: the tool memory; `/forget ID` is one's own memory
    "remember": ("/remember I like tea", EVERYONE),
    "memories": ("/memories", EVERYONE),
    "disallow": ("/disallow demo_action", ADMINS),
    "schedule": ("/schedule every 1h nag", ADMINS),
    "unschedule": ("/unschedule 99", ADMINS),
    "ban": ("/ban 77", ADMINS),
    "unban": ("/unban 77", ADMINS),
    "bans": ("/bans", ADMINS),
    "agent": ("/agent", EVERYONE),  # alone it only shows the profile and why
    "id": ("/id", ADMINS),  # anyone in a private chat with the bot: test_telegram_id.py
    "new": ("", frozenset()),
}
CHANGES: Final[dict[str, tuple[str, frozenset[str]]]] = {
    "model": ("/model big-model", ADMINS),
    "persona": ("/persona a pirate", ADMINS),
    "reasoning": ("/reasoning high", ADMINS),
    "allow": ("/allow demo_action", ADMINS),
    "queue": ("/queue collect", ADMINS),
    # No binding lets this chat's admins switch: only a gateway admin may choose a profile.
    "agent": ("/agent use default", frozenset({"gateway admin"})),
}


def refused(ok: bool, text: str) -> bool:
    return not ok and "only" in text and "admin" in text


async def test_every_command_is_in_the_table(engines: EngineRig) -> None:
    async with engines.open() as engine:
        assert {command.name for command in engine.commands} == set(COMMANDS)


@pytest.mark.parametrize("table", [COMMANDS, CHANGES], ids=["commands", "changes"])
async def test_who_may_run_which_command_in_a_shared_chat(
    engines: EngineRig, table: dict[str, tuple[str, frozenset[str]]]
) -> None:
    async with engines.open(admins="telegram:13") as engine:
        await engine.store.ensure(CHAT)
        wrong = {}
        for name, (typed, allowed) in table.items():
            if not typed:
                continue
            for kind, origin in CALLERS.items():
                submission = await engine.router.submit(Inbound(origin, CHAT, typed))
                reply = submission.command
                assert reply is not None, (name, kind)
                got = not refused(reply.ok, reply.text)
                if got != (kind in allowed):
                    wrong[(name, kind)] = reply.text
        assert not wrong, wrong


async def test_the_operators_terminal_and_api_token_choose_any_profile(engines: EngineRig) -> None:
    """Gateway admins are the same for `/agent use` as everywhere: the local terminal and the
    API token's holder count in their own sessions, with no AGENVOY_ADMINS entry."""
    async with engines.open() as engine:
        for session_id, origin in (
            ("cli-op", Origin("terminal", "w1", sender_id="op", sender_name="Op")),
            ("chat-op", Origin("http", "w2", sender_id="api", sender_name="API")),
        ):
            await engine.store.ensure(session_id, owner=origin.sender_key)
            typed = Inbound(origin, session_id, "/agent use default")
            reply = (await engine.router.submit(typed)).command
            assert reply is not None and reply.ok, (origin.platform, reply)
            assert reply.text == "profile default answers here from the next message"
