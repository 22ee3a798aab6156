"""One face for the two chat platforms, so a behaviour test runs unchanged against the fake
Telegram and the fake Discord: a `ChatDriver` starts a gateway core with the platform's
adapter (through the rigs), posts as members of the platform's chats, reads what the bot
posted there as people see it, and presses the buttons of its prompts.

Each platform has two group chats (`A`, `B`) and four members; `DEE` is an admin. Where the
platforms differ in a way a test must know (Telegram delivers an update again until it is
confirmed; Discord does not), the driver says so (`redelivers`, `held`)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import discord_rig
import telegram_rig
from fakes.discord import FakeDiscord, point_discord_py_at, text_channel, user
from fakes.telegram import FakeTelegram
from support import wait_until

from adapters.chat import ChatAdapter
from adapters.discord.adapter import DiscordAdapter
from adapters.telegram import TelegramAdapter
from gateway.events import Origin
from gateway.runtime import Runtime

JSON = dict[str, Any]
Logs = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Member:
    id: int
    name: str


@dataclass(frozen=True)
class Chat:
    """A group chat (Telegram) or guild text channel (Discord) the bot serves."""

    key: str


ANN, BOB, CY, DEE = Member(11, "ann"), Member(12, "bob"), Member(13, "cy"), Member(14, "dee")
MEMBERS = (ANN, BOB, CY, DEE)
ADMIN = DEE
A, B = Chat("a"), Chat("b")


@dataclass(frozen=True)
class Said:
    """A message of the bot's as the chat shows it now."""

    id: str
    text: str  # what people read (Telegram: the parsed HTML's text; Discord: the content)
    sent: str  # what the bot sent for it (Telegram: the HTML; Discord: the content)
    code: tuple[str, ...]  # the lines shown inside code blocks
    buttons: Mapping[str, str]  # label → what pressing it sends, for buttons still live
    raw: JSON = field(repr=False)


@dataclass(frozen=True)
class Pressed:
    """What a button press came to, for the one who pressed it."""

    accepted: bool
    told: str  # what the presser alone was told ("" for a plain acknowledgement)
    told_only_them: bool  # said to the presser alone, in a way they cannot miss


class ChatDriver(Protocol):
    """What a behaviour test needs of a chat platform."""

    platform: str
    limit: int  # the longest message the platform takes, in its own units (`length`)
    redelivers: bool  # a message whose intake failed comes again (it is not lost meanwhile)

    @property
    def fake(self) -> FakeTelegram | FakeDiscord: ...

    @property
    def runtime(self) -> Runtime: ...

    @property
    def adapter(self) -> ChatAdapter: ...

    async def start(self, **settings: Any) -> None:
        """A gateway core and the adapter, on this driver's home and fake platform."""

    async def stop(self) -> None: ...

    async def restart(self) -> None:
        """Stop the gateway and start it again on the same home, settings and platform."""

    def session_id(self, chat: Chat) -> str: ...

    def origin(self, chat: Chat, member: Member) -> Origin:
        """Where a task `member` starts in `chat` is answered (for delivering events)."""

    def post(
        self,
        chat: Chat,
        member: Member,
        text: str,
        *,
        to_bot: bool = True,
        file: tuple[str, bytes] | None = None,
    ) -> JSON:
        """`member` writes in `chat`, addressed to the bot (a mention) or as chatter; returns
        the platform's delivery of it."""

    def said(self, chat: Chat) -> list[Said]:
        """The bot's messages in `chat`, oldest first, as they stand (deleted ones left out)."""

    def prompts(self, chat: Chat) -> list[Said]:
        """The bot's messages in `chat` that were posted with buttons, oldest first."""

    def edits(self, chat: Chat) -> list[str]:
        """The texts the bot edited its messages in `chat` to, in order."""

    def deleted(self, chat: Chat) -> list[str]:
        """The ids of the bot's messages in `chat` it deleted, in order."""

    async def press(self, prompt: Said, label: str, member: Member) -> Pressed:
        """`member` presses the button `label` of `prompt` (as it was when read)."""

    def length(self, text: str) -> int:
        """The length of a message as the platform counts it."""

    def readable(self, reply: str) -> str:
        """What people read of `reply` if it went out as one message, however long."""

    def rejoined(self, parts: Sequence[str]) -> str:
        """The parts' texts put back together, without what the split added to each."""

    def waits_for_database(self, logs: Logs) -> bool:
        """Whether the adapter has met the unreachable database with a message and waits."""

    def held(self, delivery: JSON) -> bool:
        """Whether the platform still holds `delivery` to deliver it again."""


async def nth_said(driver: ChatDriver, chat: Chat, n: int, within: float = 10) -> Said:
    """The `n`-th (from 0) message of the bot in `chat`, once there is one."""

    async def there() -> bool:
        return len(driver.said(chat)) > n

    assert await wait_until(there, within), f"{driver.platform}: no message {n} in {chat}"
    return driver.said(chat)[n]


async def said_with(driver: ChatDriver, chat: Chat, text: str, within: float = 10) -> Said:
    """The first message of the bot in `chat` that contains `text`, once there is one."""

    def found() -> list[Said]:
        return [s for s in driver.said(chat) if text in s.text]

    async def there() -> bool:
        return bool(found())

    seen = driver.said(chat)
    assert await wait_until(there, within), f"{driver.platform}: no {text!r} in {chat}: {seen}"
    return found()[0]


async def nth_prompt(driver: ChatDriver, chat: Chat, n: int = 0, within: float = 10) -> Said:
    """The `n`-th (from 0) prompt the bot posted in `chat`, once there is one."""

    async def there() -> bool:
        return len(driver.prompts(chat)) > n

    assert await wait_until(there, within), f"{driver.platform}: no prompt {n} in {chat}"
    return driver.prompts(chat)[n]


async def task_of(driver: ChatDriver, chat: Chat) -> str:
    """The task of the latest message to the bot in `chat`, as the archive records it."""
    messages = await driver.runtime.store.recent_messages(driver.session_id(chat), 50)
    return next(m.task_hash for m in reversed(messages) if m.role == "user" and m.task_hash)


def _admins(member: Member, platform: str, settings: dict[str, Any]) -> dict[str, Any]:
    listed = [a for a in str(settings.get("admins", "")).split(",") if a]
    return {**settings, "admins": ",".join([*listed, f"{platform}:{member.id}"])}


class _Rig(Protocol):
    @property
    def runtime(self) -> Runtime: ...

    @property
    def adapter(self) -> ChatAdapter: ...


R = TypeVar("R", bound=_Rig)


class _Driver(Generic[R]):
    """What the two drivers share: a gateway started and stopped through the platform's rig
    (with `DEE` among the admins), and the sessions and origins of the platform's chats."""

    platform: str
    prefix: str  # of the platform's session ids
    chat_ids: Mapping[Chat, int]

    def __init__(self, home: Path) -> None:
        self.home = home
        self.rig: R | None = None
        self._settings: dict[str, Any] = {}

    @property
    def runtime(self) -> Runtime:
        assert self.rig is not None, "the gateway is not running"
        return self.rig.runtime

    @property
    def adapter(self) -> ChatAdapter:
        assert self.rig is not None, "the gateway is not running"
        return self.rig.adapter

    async def start(self, **settings: Any) -> None:
        self._settings = _admins(ADMIN, self.platform, settings)
        self.rig = await self._start_rig(**self._settings)

    async def stop(self) -> None:
        if self.rig is not None:
            rig, self.rig = self.rig, None
            await self._stop_rig(rig)

    async def restart(self) -> None:
        await self.stop()
        await self.start(**self._settings)

    def session_id(self, chat: Chat) -> str:
        return f"{self.prefix}-{self.chat_ids[chat]}"

    def origin(self, chat: Chat, member: Member) -> Origin:
        return Origin(
            self.platform,
            channel_id=str(self.chat_ids[chat]),
            sender_id=str(member.id),
            sender_name=member.name,
        )

    async def _start_rig(self, **settings: Any) -> R:
        raise NotImplementedError

    async def _stop_rig(self, rig: R) -> None:
        raise NotImplementedError


# -- Telegram --------------------------------------------------------------------------------


TELEGRAM_CHATS = {A: -501, B: -502}


def _utf16_slice(text: str, offset: int, length: int) -> str:
    units = text.encode("utf-16-le")
    return units[2 * offset : 2 * (offset + length)].decode("utf-16-le")


class TelegramDriver(_Driver[telegram_rig.Rig]):
    platform = "telegram"
    prefix = "tg"
    chat_ids = TELEGRAM_CHATS
    limit = 4096
    redelivers = TelegramAdapter.redelivers

    def __init__(self, fake: FakeTelegram, home: Path) -> None:
        super().__init__(home)
        self.fake = fake
        self.users = {m: fake.user(m.id, m.name) for m in MEMBERS}
        self.chats = {c: fake.group(cid, f"chat {c.key}") for c, cid in TELEGRAM_CHATS.items()}

    async def _start_rig(self, **settings: Any) -> telegram_rig.Rig:
        rig = await telegram_rig.start_rig(self.fake, self.home, **settings)
        # An update held back by an outage is tried again soon once the database is back.
        rig.adapter.poller.max_wait = 0.2
        return rig

    async def _stop_rig(self, rig: telegram_rig.Rig) -> None:
        await telegram_rig.stop_rig(rig)

    def post(
        self,
        chat: Chat,
        member: Member,
        text: str,
        *,
        to_bot: bool = True,
        file: tuple[str, bytes] | None = None,
    ) -> JSON:
        mention = f"@{self.fake.bot_user['username']} "
        return self.fake.inject_message(
            self.chats[chat], self.users[member], mention + text if to_bot else text, document=file
        )

    def reply(self, chat: Chat, member: Member, text: str, *, to: Said) -> JSON:
        """`member` answers the bot's message `to` in `chat` with Telegram's reply (what a
        ForceReply question asks for), without mentioning the bot."""
        return self.fake.inject_message(self.chats[chat], self.users[member], text, reply_to=to.raw)

    def _sent(self, chat_id: int) -> dict[int, str]:
        """What the bot sent for each of its messages in the chat, by message id."""
        return {
            record.response["result"]["message_id"]: str(record.data.get("text", ""))
            for record in self.fake.call_log
            if record.method == "sendMessage"
            and record.ok
            and record.data.get("chat_id") == chat_id
        }

    def _prompt_ids(self, chat_id: int) -> list[int]:
        return [
            record.response["result"]["message_id"]
            for record in self.fake.call_log
            if record.method == "sendMessage"
            and record.ok
            and record.data.get("chat_id") == chat_id
            and "inline_keyboard" in record.data.get("reply_markup", {})
        ]

    @staticmethod
    def _said(message: JSON, sent: Mapping[int, str]) -> Said:
        text = str(message.get("text", ""))
        blocks = [
            _utf16_slice(text, e["offset"], e["length"])
            for e in message.get("entities", [])
            if e["type"] == "pre"
        ]
        keyboard = message.get("reply_markup", {}).get("inline_keyboard", [])
        buttons = {b["text"]: b["callback_data"] for row in keyboard for b in row}
        code = tuple(line for block in blocks for line in block.splitlines())
        message_id = message["message_id"]
        return Said(str(message_id), text, sent.get(message_id, text), code, buttons, message)

    def said(self, chat: Chat) -> list[Said]:
        chat_id = TELEGRAM_CHATS[chat]
        sent = self._sent(chat_id)
        return [self._said(m, sent) for m in self.fake.sent_messages(chat_id)]

    def prompts(self, chat: Chat) -> list[Said]:
        chat_id = TELEGRAM_CHATS[chat]
        sent = self._sent(chat_id)
        found = [self.fake.message(chat_id, message_id) for message_id in self._prompt_ids(chat_id)]
        return [self._said(m, sent) for m in found if m is not None]

    def edits(self, chat: Chat) -> list[str]:
        chat_id = TELEGRAM_CHATS[chat]
        return [
            str(p["text"])
            for p in self.fake.calls_to("editMessageText")
            if p is not None and p.get("chat_id") == chat_id
        ]

    def deleted(self, chat: Chat) -> list[str]:
        chat_id = TELEGRAM_CHATS[chat]
        return [
            str(p["message_id"])
            for p in self.fake.calls_to("deleteMessage")
            if p is not None and p.get("chat_id") == chat_id
        ]

    async def press(self, prompt: Said, label: str, member: Member) -> Pressed:
        update = self.fake.inject_callback(self.users[member], prompt.raw, prompt.buttons[label])
        query = update["callback_query"]["id"]
        answer = await self.fake.wait_for_call(
            "answerCallbackQuery", lambda p: str(p.get("callback_query_id")) == query, timeout=10
        )
        told = str(answer.get("text") or "")
        alert = answer.get("show_alert") in (True, "true")
        # The answer is only a toast to the presser; an accepted press says no more than that.
        accepted = told == "thanks" and not alert
        return Pressed(accepted, "" if accepted else told, alert)

    def length(self, text: str) -> int:
        return len(text.encode("utf-16-le")) // 2

    def readable(self, reply: str) -> str:
        # Telegram shows a code block as its lines, without the fences around them.
        return "".join(
            line for line in reply.splitlines(keepends=True) if not line.startswith("```")
        )

    def rejoined(self, parts: Sequence[str]) -> str:
        return "".join(parts)

    def waits_for_database(self, logs: Logs) -> bool:
        # Twice: the update was held, and tried again rather than confirmed.
        met = [e for e in logs if str(e["event"]).startswith("archive unreachable")]
        return len(met) >= 2

    def held(self, delivery: JSON) -> bool:
        pending = {u["update_id"] for u in self.fake.pending_updates()}
        return delivery["update_id"] in pending


# -- Discord ---------------------------------------------------------------------------------


DISCORD_CHATS = {A: discord_rig.GENERAL, B: 904}
_FENCE = re.compile(r"^\s*```")
_BOT_MESSAGE = re.compile(r"/channels/(\d+)/messages/(\d+)$")


def _code_lines(content: str) -> tuple[str, ...]:
    """The lines between a fence and the fence that closes it; a fence left open shows no
    code block."""
    lines: list[str] = []
    block: list[str] | None = None
    for line in content.split("\n"):
        if _FENCE.match(line):
            if block is None:
                block = []
            else:
                lines += block
                block = None
        elif block is not None:
            block.append(line)
    return tuple(lines)


class DiscordDriver(_Driver[discord_rig.Rig]):
    platform = "discord"
    prefix = "dc"
    chat_ids = DISCORD_CHATS
    limit = 2000
    redelivers = DiscordAdapter.redelivers

    def __init__(self, fake: FakeDiscord, home: Path) -> None:
        super().__init__(home)
        self.fake = fake
        self.users = {m: user(m.id, m.name) for m in MEMBERS}
        channels = [text_channel(cid, f"chat-{c.key}") for c, cid in DISCORD_CHATS.items()]
        fake.add_guild(
            discord_rig.GUILD, "guild", channels=channels, members=[*self.users.values()]
        )

    async def _start_rig(self, **settings: Any) -> discord_rig.Rig:
        return await discord_rig.start_rig(self.fake, self.home, **settings)

    async def _stop_rig(self, rig: discord_rig.Rig) -> None:
        await discord_rig.stop_rig(rig)

    def post(
        self,
        chat: Chat,
        member: Member,
        text: str,
        *,
        to_bot: bool = True,
        file: tuple[str, bytes] | None = None,
    ) -> JSON:
        return self.fake.inject_message(
            DISCORD_CHATS[chat],
            self.users[member],
            text,
            mentions_bot=to_bot,
            attachments=[file] if file is not None else None,
        )

    @staticmethod
    def _said(message: JSON) -> Said:
        content = str(message.get("content", ""))
        buttons = {
            c["label"]: c["custom_id"]
            for row in message.get("components", [])
            for c in row["components"]
            if not c.get("disabled")
        }
        return Said(str(message["id"]), content, content, _code_lines(content), buttons, message)

    def said(self, chat: Chat) -> list[Said]:
        return [self._said(m) for m in self.fake.sent_messages(DISCORD_CHATS[chat])]

    def prompts(self, chat: Chat) -> list[Said]:
        sent = self.fake.sent_messages(DISCORD_CHATS[chat])
        return [self._said(m) for m in sent if m.get("components")]

    def _calls(self, method: str, chat: Chat) -> list[tuple[str, JSON]]:
        """(message id, body) of the bot's `method` calls on messages of `chat`."""
        channel = str(DISCORD_CHATS[chat])
        found = []
        for record in self.fake.call_log:
            match = _BOT_MESSAGE.search(record.path)
            if record.method == method and match is not None and match[1] == channel:
                found.append((match[2], record.data))
        return found

    def edits(self, chat: Chat) -> list[str]:
        return [str(body.get("content")) for _, body in self._calls("PATCH", chat)]

    def deleted(self, chat: Chat) -> list[str]:
        return [message_id for message_id, _ in self._calls("DELETE", chat)]

    async def press(self, prompt: Said, label: str, member: Member) -> Pressed:
        pressed = self.fake.inject_component(self.users[member], prompt.raw, prompt.buttons[label])
        route = f"POST /interactions/{pressed['id']}/{pressed['token']}/callback"
        answer = await self.fake.wait_for_call(route, timeout=10)
        if answer["type"] != 4:  # the prompt updated, or a modal opened: taken
            return Pressed(True, "", False)
        data = answer["data"]
        return Pressed(False, str(data["content"]), bool(data.get("flags", 0) & 64))

    def length(self, text: str) -> int:
        return len(text)

    def readable(self, reply: str) -> str:
        return reply  # Discord renders the Markdown as sent

    def rejoined(self, parts: Sequence[str]) -> str:
        # A cut inside a code block closes it at the end of one part ("\n```") and reopens it
        # at the start of the next ("```lang\n"): both go.
        joined: list[str] = []
        reopened = False
        for index, part in enumerate(parts):
            if reopened:
                part = part.split("\n", 1)[1]
            following = parts[index + 1] if index + 1 < len(parts) else ""
            reopened = part.endswith("\n```") and _FENCE.match(following) is not None
            joined.append(part.removesuffix("```") if reopened else part)
        return "".join(joined)

    def waits_for_database(self, logs: Logs) -> bool:
        wanted = "taking a message in: database unavailable, waiting"
        return any(str(e["event"]) == wanted for e in logs)

    def held(self, delivery: JSON) -> bool:
        return False  # a gateway event is sent once; the adapter holds the message itself


# -- opening ---------------------------------------------------------------------------------

Opener = Callable[[Path], contextlib.AbstractAsyncContextManager[ChatDriver]]


@contextlib.asynccontextmanager
async def open_telegram(home: Path) -> AsyncIterator[ChatDriver]:
    async with FakeTelegram() as fake:
        driver = TelegramDriver(fake, home)
        try:
            yield driver
        finally:
            await driver.stop()


@contextlib.asynccontextmanager
async def open_discord(home: Path) -> AsyncIterator[ChatDriver]:
    async with FakeDiscord() as fake:
        driver = DiscordDriver(fake, home)
        with point_discord_py_at(fake):
            try:
                yield driver
            finally:
                await driver.stop()


DRIVERS: dict[str, Opener] = {"telegram": open_telegram, "discord": open_discord}
