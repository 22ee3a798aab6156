"""The fake Telegram Bot API, driven by the real python-telegram-bot client."""

from __future__ import annotations

import asyncio
import datetime as dtm
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from fakes.telegram import FakeTelegram, parse_html
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
)
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

WAIT = 5.0


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx honours proxy variables; requests to the local fake must never go through one.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


def build_app(fake: FakeTelegram) -> tuple[Application, list[BaseException]]:  # type: ignore[type-arg]
    errors: list[BaseException] = []

    async def start(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None
        keyboard = InlineKeyboardMarkup([[InlineKeyboardButton("Ping", callback_data="ping")]])
        await update.effective_message.reply_text("Welcome!", reply_markup=keyboard)

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None
        await update.effective_message.reply_text(f"echo: {update.effective_message.text}")

    async def clicked(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        assert query is not None
        await query.answer("pong")
        await query.edit_message_text(f"clicked {query.data}")

    async def on_error(update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert context.error is not None
        errors.append(context.error)

    app = (
        ApplicationBuilder()
        .token(fake.token)
        .base_url(fake.base_url)
        .base_file_url(fake.base_file_url)
        .build()
    )
    app.add_handler(CommandHandler("start", start))
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, echo))
    app.add_handler(CallbackQueryHandler(clicked))
    app.add_error_handler(on_error)
    return app, errors


async def stop_app(app: Application) -> None:  # type: ignore[type-arg]
    assert app.updater is not None
    await app.updater.stop()
    await app.stop()
    await app.shutdown()


@pytest.fixture
async def running(fake: FakeTelegram) -> AsyncIterator[Application]:  # type: ignore[type-arg]
    app, errors = build_app(fake)
    assert app.updater is not None
    await app.initialize()
    await app.start()
    await app.updater.start_polling(poll_interval=0, timeout=1)
    yield app
    await asyncio.wait_for(stop_app(app), 2)
    assert errors == []


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(fake.token, base_url=fake.base_url, base_file_url=fake.base_file_url) as b:
        yield b


# -- the polling bot end to end ----------------------------------------------------------------


async def test_initialize_calls_get_me_and_polling_bootstrap(
    fake: FakeTelegram,
    running: Application,  # type: ignore[type-arg]
) -> None:
    assert running.bot.username == "agenvoy_test_bot"
    assert running.bot.id == 123456
    await fake.wait_for_call("getUpdates", timeout=WAIT)
    names = [name for name, _ in fake.calls]
    assert names[0] == "getMe"
    assert names.index("deleteWebhook") < names.index("getUpdates")


async def test_message_gets_echoed(
    fake: FakeTelegram,
    running: Application,  # type: ignore[type-arg]
) -> None:
    alice = fake.user(1001, "Alice", "alice")
    chat = fake.private_chat(1001, "Alice")
    update = fake.inject_message(chat, alice, "hello there")
    assert update["message"]["text"] == "hello there"

    params = await fake.wait_for_call("sendMessage", timeout=WAIT)
    assert params["chat_id"] == 1001
    assert params["text"] == "echo: hello there"
    [sent] = fake.sent_messages(1001)
    assert sent["text"] == "echo: hello there"
    assert sent["from"]["id"] == fake.bot_user["id"]
    assert sent["message_id"] == update["message"]["message_id"] + 1
    assert "reply_to_message" not in sent  # private chats get no quoted reply


async def test_text_that_looks_like_a_number_stays_text(
    fake: FakeTelegram,
    running: Application,  # type: ignore[type-arg]
) -> None:
    bob = fake.user(1002, "Bob")
    fake.inject_message(fake.private_chat(1002), bob, "123")
    params = await fake.wait_for_call("sendMessage", timeout=WAIT)
    assert params["text"] == "echo: 123"


async def test_messages_are_handled_in_order(
    fake: FakeTelegram,
    running: Application,  # type: ignore[type-arg]
) -> None:
    bob = fake.user(1002, "Bob")
    chat = fake.private_chat(1002)
    for word in ("one", "two", "three"):
        fake.inject_message(chat, bob, word)
    texts = [(await fake.wait_for_call("sendMessage", timeout=WAIT))["text"] for _ in range(3)]
    assert texts == ["echo: one", "echo: two", "echo: three"]


async def test_group_reply_is_quoted(
    fake: FakeTelegram,
    running: Application,  # type: ignore[type-arg]
) -> None:
    carol = fake.user(1003, "Carol")
    team = fake.group(-4001, "Team")
    update = fake.inject_message(team, carol, "hi @agenvoy_test_bot")
    assert update["message"]["entities"] == [{"type": "mention", "offset": 3, "length": 17}]

    params = await fake.wait_for_call("sendMessage", timeout=WAIT)
    assert params["reply_parameters"]["message_id"] == update["message"]["message_id"]
    [sent] = fake.sent_messages(-4001)
    assert sent["reply_to_message"]["text"] == "hi @agenvoy_test_bot"


async def test_forum_topic_reply_keeps_the_thread(
    fake: FakeTelegram,
    running: Application,  # type: ignore[type-arg]
) -> None:
    dave = fake.user(1004, "Dave")
    forum = fake.supergroup(-1001234567890, "Forum", is_forum=True)
    fake.inject_message(forum, dave, "in a topic", thread_id=77)
    params = await fake.wait_for_call("sendMessage", timeout=WAIT)
    assert params["message_thread_id"] == 77
    [sent] = fake.sent_messages(forum["id"])
    assert sent["message_thread_id"] == 77
    assert sent["is_topic_message"] is True


async def test_command_with_inline_keyboard_then_callback(
    fake: FakeTelegram,
    running: Application,  # type: ignore[type-arg]
) -> None:
    erin = fake.user(1005, "Erin")
    chat = fake.private_chat(1005)
    update = fake.inject_message(chat, erin, "/start")
    assert update["message"]["entities"] == [{"type": "bot_command", "offset": 0, "length": 6}]

    params = await fake.wait_for_call("sendMessage", timeout=WAIT)
    assert params["text"] == "Welcome!"
    [sent] = fake.sent_messages(1005)
    button = sent["reply_markup"]["inline_keyboard"][0][0]
    assert button == {"text": "Ping", "callback_data": "ping"}

    callback = fake.inject_callback(erin, sent, button["callback_data"])
    answer = await fake.wait_for_call("answerCallbackQuery", timeout=WAIT)
    assert answer["callback_query_id"] == callback["callback_query"]["id"]
    assert fake.callback_answers[0]["text"] == "pong"
    assert fake.callback_answers[0]["show_alert"] is False

    edit = await fake.wait_for_call("editMessageText", timeout=WAIT)
    assert edit["message_id"] == sent["message_id"]
    [edited] = fake.sent_messages(1005)
    assert edited["text"] == "clicked ping"
    assert "reply_markup" not in edited  # an edit without a keyboard removes it
    assert "edit_date" in edited


async def test_command_addressed_to_the_bot_in_a_group(
    fake: FakeTelegram,
    running: Application,  # type: ignore[type-arg]
) -> None:
    frank = fake.user(1006, "Frank")
    team = fake.supergroup(-1009876543210, "Team")
    update = fake.inject_message(team, frank, "/start@agenvoy_test_bot now")
    assert update["message"]["entities"] == [{"type": "bot_command", "offset": 0, "length": 23}]
    params = await fake.wait_for_call("sendMessage", timeout=WAIT)
    assert params["text"] == "Welcome!"


async def test_stop_confirms_fetched_updates(fake: FakeTelegram) -> None:
    app, errors = build_app(fake)
    assert app.updater is not None
    await app.initialize()
    await app.start()
    await app.updater.start_polling(poll_interval=0, timeout=1)
    fake.inject_message(fake.private_chat(1007), fake.user(1007, "Gina"), "hi")
    await fake.wait_for_call("sendMessage", timeout=WAIT)
    await asyncio.wait_for(stop_app(app), 2)
    assert fake.pending_updates() == []
    assert errors == []


async def test_shutdown_is_fast_with_a_long_poll_pending(fake: FakeTelegram) -> None:
    app, errors = build_app(fake)
    assert app.updater is not None
    await app.initialize()
    await app.start()
    await app.updater.start_polling(poll_interval=0, timeout=30)
    await fake.wait_until_polling(timeout=WAIT)
    started = time.monotonic()
    await asyncio.wait_for(stop_app(app), 2)
    await asyncio.wait_for(fake.stop(), 2)
    assert time.monotonic() - started < 2
    assert errors == []


async def test_fake_stop_wakes_a_pending_long_poll(fake: FakeTelegram, bot: Bot) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=30, read_timeout=35))
    await fake.wait_until_polling(timeout=WAIT)
    await asyncio.wait_for(fake.stop(), 2)
    # The client sees either the empty answer or the closed connection; it does not hang.
    await asyncio.wait_for(asyncio.gather(poll, return_exceptions=True), 2)


# -- error injection with direct Bot calls ----------------------------------------------------


async def test_retry_after(fake: FakeTelegram, bot: Bot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "1")
    fake.fail_next("sendMessage", 429, retry_after=1)
    with pytest.raises(RetryAfter) as caught:
        await bot.send_message(1001, "hello")
    assert caught.value.retry_after == dtm.timedelta(seconds=1)
    # The failure was used up: the next call goes through.
    message = await bot.send_message(1001, "hello")
    assert message.text == "hello"
    assert [name for name, _ in fake.calls].count("sendMessage") == 2


async def test_wait_for_call_sees_answered_calls(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next("sendMessage", 502, "Bad Gateway")
    send = asyncio.create_task(bot.send_message(1001, "first try"))
    failed = await fake.wait_for_call("sendMessage", ok=False, timeout=WAIT)
    assert failed["text"] == "first try"
    assert fake.call_log[-1].status == 502
    assert fake.call_log[-1].description == "Bad Gateway"
    await asyncio.gather(send, return_exceptions=True)
    assert fake.sent_messages() == []

    send = asyncio.create_task(bot.send_message(1001, "second try"))
    # The default waits for a successful call, and the message is stored when it returns.
    done = await fake.wait_for_call("sendMessage", timeout=WAIT)
    assert done["text"] == "second try"
    assert [m["text"] for m in fake.sent_messages(1001)] == ["second try"]
    await send
    with pytest.raises(AssertionError, match="sendMessage->502"):
        await fake.wait_for_call("sendMessage", timeout=0.05)


async def test_failures_queue_up(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next("sendMessage", 403, "Forbidden: bot was kicked from the group chat")
    fake.fail_next("sendMessage", 400, "Bad Request: chat not found")
    with pytest.raises(Forbidden, match="kicked"):
        await bot.send_message(-4001, "x")
    with pytest.raises(BadRequest, match="Chat not found"):
        await bot.send_message(-4001, "x")
    await bot.send_message(-4001, "x")


async def test_failure_for_a_matching_call_only(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next(
        "sendMessage", 400, "Bad Request: chat not found", when=lambda p: p["text"] == "b"
    )
    await bot.send_message(-4001, "a")  # does not match: goes through
    with pytest.raises(BadRequest, match="Chat not found"):
        await bot.send_message(-4001, "b")
    await bot.send_message(-4001, "b")  # the failure was used up


async def test_failure_for_several_calls(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user", times=2)
    for _ in range(2):
        with pytest.raises(Forbidden, match="blocked"):
            await bot.send_message(1001, "x")
    await bot.send_message(1001, "x")
    assert [c.status for c in fake.call_log if c.method == "sendMessage"] == [403, 403, 200]


async def test_dropped_connection(fake: FakeTelegram, bot: Bot) -> None:
    fake.drop_next("sendMessage", when=lambda p: p["text"] == "lost")
    await bot.send_message(1001, "kept")
    with pytest.raises(NetworkError):
        await bot.send_message(1001, "lost")
    dropped = await fake.wait_for_record("sendMessage", ok=False, timeout=WAIT)
    assert dropped.dropped and dropped.status is None and dropped.data["text"] == "lost"
    await bot.send_message(1001, "lost")  # the failure was used up
    assert [m["text"] for m in fake.sent_messages(1001)] == ["kept", "lost"]


async def test_forbidden(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
    with pytest.raises(Forbidden, match="blocked"):
        await bot.send_message(1001, "hello")


async def test_chat_migrated_injected(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next("sendMessage", 400, migrate_to_chat_id=-1001111111111)
    with pytest.raises(ChatMigrated) as caught:
        await bot.send_message(-4001, "hello")
    assert caught.value.new_chat_id == -1001111111111


async def test_chat_migrated_after_upgrade_message(fake: FakeTelegram, bot: Bot) -> None:
    team = fake.group(-4002, "Team")
    fake.inject_message(team, fake.user(1008, "Hana"), migrate_to_chat_id=-1002222222222)
    with pytest.raises(ChatMigrated) as caught:
        await bot.send_message(-4002, "hello")
    assert caught.value.new_chat_id == -1002222222222
    message = await bot.send_message(-1002222222222, "hello")
    assert message.chat.type == "supergroup"
    assert message.chat.title == "Team"


async def test_message_too_long(fake: FakeTelegram, bot: Bot) -> None:
    await bot.send_message(1001, "a" * 4096)
    with pytest.raises(BadRequest, match=r"(?i)message is too long"):
        await bot.send_message(1001, "a" * 4097)
    # Telegram counts UTF-16 code units: an emoji counts twice.
    with pytest.raises(BadRequest, match=r"(?i)message is too long"):
        await bot.send_message(1001, "\N{GRINNING FACE}" * 2049)


@pytest.mark.parametrize(
    "markup",
    [
        "line<br>break",
        "<b>bold",
        "<b>bold</i>",
        "a < b",
        "<span>no class</span>",
        "<div>block</div>",
        "</b>",
        '<a href="x>x</a>',
    ],
)
async def test_malformed_html_is_rejected(fake: FakeTelegram, bot: Bot, markup: str) -> None:
    with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
        await bot.send_message(1001, markup, parse_mode="HTML")
    assert fake.sent_messages() == []


async def test_well_formed_html_becomes_entities(fake: FakeTelegram, bot: Bot) -> None:
    html = (
        '<b>bold</b> <a href="https://example.com/?a=1&amp;b=2">link</a> &lt;ok&gt; '
        '<pre><code class="language-python">x = 1</code></pre> '
        '<span class="tg-spoiler">s</span><blockquote expandable>q</blockquote>'
    )
    message = await bot.send_message(1001, html, parse_mode="HTML")
    assert message.text == "bold link <ok> x = 1 sq"
    kinds = [(e.type, e.offset, e.length) for e in message.entities]
    assert kinds == [
        ("bold", 0, 4),
        ("text_link", 5, 4),
        ("pre", 15, 5),
        ("spoiler", 21, 1),
        ("expandable_blockquote", 22, 1),
    ]
    assert message.entities[1].url == "https://example.com/?a=1&b=2"
    assert message.entities[2].language == "python"


def test_html_offsets_count_utf16_units() -> None:
    text, entities = parse_html("\N{GRINNING FACE} <i>x</i>")
    assert text == "\N{GRINNING FACE} x"
    assert entities == [{"type": "italic", "offset": 3, "length": 1}]


async def test_edit_rules(fake: FakeTelegram, bot: Bot) -> None:
    keyboard = InlineKeyboardMarkup([[InlineKeyboardButton("A", callback_data="a")]])
    message = await bot.send_message(1001, "same", reply_markup=keyboard)
    with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
        await bot.edit_message_text("same", 1001, message.message_id, reply_markup=keyboard)
    with pytest.raises(BadRequest, match=r"(?i)message to edit not found"):
        await bot.edit_message_text("new", 1001, 999)
    edited = await bot.edit_message_reply_markup(1001, message.message_id, reply_markup=None)
    assert isinstance(edited, type(message))
    assert edited.reply_markup is None
    assert await bot.delete_message(1001, message.message_id)
    assert fake.sent_messages(1001) == []
    with pytest.raises(BadRequest, match=r"(?i)message to delete not found"):
        await bot.delete_message(1001, message.message_id)


async def test_callback_data_limit(fake: FakeTelegram, bot: Bot) -> None:
    keyboard = InlineKeyboardMarkup([[InlineKeyboardButton("A", callback_data="x" * 65)]])
    with pytest.raises(BadRequest, match=r"(?i)button_data_invalid"):
        await bot.send_message(1001, "too much data", reply_markup=keyboard)


async def test_answer_callback_query_needs_a_real_query(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match=r"(?i)query is too old"):
        await bot.answer_callback_query("12345")
    sent = await bot.send_message(1001, "pick")
    update = fake.inject_callback(fake.user(1001, "Alice"), sent.to_dict(), "x")
    query_id = update["callback_query"]["id"]
    assert await bot.answer_callback_query(query_id, text="done", show_alert=True)
    assert fake.callback_answers == [
        {
            "callback_query_id": query_id,
            "text": "done",
            "show_alert": True,
            "url": None,
            "cache_time": None,
        }
    ]
    with pytest.raises(BadRequest, match=r"(?i)query is too old"):
        await bot.answer_callback_query(query_id)


async def test_unknown_method_and_wrong_token(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(EndPointNotFound):
        await bot.do_api_request("sendNothing")
    stranger = Bot("999:WRONG", base_url=fake.base_url)
    try:
        with pytest.raises(InvalidToken, match="rejected"):
            await stranger.initialize()
    finally:
        await stranger.shutdown()


async def test_chat_action_commands_and_chat(fake: FakeTelegram, bot: Bot) -> None:
    assert await bot.send_chat_action(1001, "typing")
    with pytest.raises(BadRequest):
        await bot.send_chat_action(1001, "dancing")

    await bot.set_my_commands([("start", "Start the bot"), ("help", "Show help")])
    assert [(c.command, c.description) for c in await bot.get_my_commands()] == [
        ("start", "Start the bot"),
        ("help", "Show help"),
    ]
    assert fake.my_commands()[1] == {"command": "help", "description": "Show help"}
    with pytest.raises(BadRequest, match=r"(?i)bot_command_invalid"):
        await bot.set_my_commands([("Bad-Name", "nope")])
    await bot.delete_my_commands()
    assert await bot.get_my_commands() == ()

    fake.supergroup(-1003333333333, "Crew", is_forum=True)
    chat = await bot.get_chat(-1003333333333)
    assert chat.title == "Crew"
    assert chat.is_forum is True


async def test_files_round_trip(fake: FakeTelegram, bot: Bot) -> None:
    fake.register_file("DOC1", b"registered bytes", "documents/notes.txt")
    file = await bot.get_file("DOC1")
    assert bytes(await file.download_as_bytearray()) == b"registered bytes"
    with pytest.raises(BadRequest, match=r"(?i)invalid file_id"):
        await bot.get_file("missing")

    message = await bot.send_document(1001, b"%PDF-1.4 data", filename="report.pdf")
    assert message.document is not None
    assert message.document.file_name == "report.pdf"
    assert fake.uploads[-1].filename == "report.pdf"
    assert fake.uploads[-1].data == b"%PDF-1.4 data"
    downloaded = await (await bot.get_file(message.document.file_id)).download_as_bytearray()
    assert bytes(downloaded) == b"%PDF-1.4 data"

    photo = await bot.send_photo(1001, b"\x89PNG fake", caption="<b>look</b>", parse_mode="HTML")
    assert photo.caption == "look"
    assert photo.photo[-1].file_size == len(b"\x89PNG fake")


async def test_injected_document_can_be_downloaded(
    fake: FakeTelegram,
    bot: Bot,
) -> None:
    update = fake.inject_message(
        fake.private_chat(1001),
        fake.user(1001, "Alice"),
        "see attached",
        document=("a.txt", b"attached", "text/plain"),
    )
    document = update["message"]["document"]
    assert update["message"]["caption"] == "see attached"
    file = await bot.get_file(document["file_id"])
    assert bytes(await file.download_as_bytearray()) == b"attached"

    with_photo = fake.inject_message(
        fake.private_chat(1001), fake.user(1001, "Alice"), "", photo=b"jpeg bytes"
    )
    [size] = with_photo["message"]["photo"]
    file = await bot.get_file(size["file_id"])
    assert bytes(await file.download_as_bytearray()) == b"jpeg bytes"


async def test_raw_http_shapes(fake: FakeTelegram) -> None:
    api = f"{fake.url}/bot{fake.token}"
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{fake.url}/bot1:WRONG/getMe") as response:
            assert response.status == 401
            assert await response.json() == {
                "ok": False,
                "error_code": 401,
                "description": "Unauthorized",
            }
        async with http.get(f"{api}/noSuchMethod") as response:
            assert response.status == 404
            assert (await response.json())["description"] == "Not Found"
        async with http.get(f"{api}/getMe") as response:
            assert (await response.json())["result"]["username"] == "agenvoy_test_bot"
        body = {"chat_id": 1001, "text": "123", "reply_markup": {"inline_keyboard": []}}
        async with http.post(f"{api}/sendMessage", json=body) as response:
            assert (await response.json())["result"]["text"] == "123"
        form = {"chat_id": "1001", "text": "42", "message_thread_id": "7"}
        async with http.post(f"{api}/sendmessage", data=form) as response:
            result = (await response.json())["result"]
    assert result["message_thread_id"] == 7
    assert fake.calls_to("sendMessage")[-1] == {
        "chat_id": 1001,
        "text": "42",
        "message_thread_id": 7,
    }


# -- getUpdates semantics -------------------------------------------------------------------------


async def test_get_updates_offsets_and_limit(fake: FakeTelegram, bot: Bot) -> None:
    chat, user = fake.private_chat(1001), fake.user(1001, "Alice")
    ids = [fake.inject_message(chat, user, str(n))["update_id"] for n in range(4)]
    assert [u.update_id for u in await bot.get_updates(timeout=0)] == ids
    assert [u.update_id for u in await bot.get_updates(timeout=0, limit=2)] == ids[:2]
    assert [u.update_id for u in await bot.get_updates(offset=ids[1], timeout=0)] == ids[1:]
    assert [u.update_id for u in await bot.get_updates(offset=-1, timeout=0)] == ids[3:]
    assert [u.update_id for u in await bot.get_updates(offset=ids[3] + 1, timeout=0)] == []


async def test_redelivered_update_comes_again_in_order(fake: FakeTelegram, bot: Bot) -> None:
    chat, user = fake.private_chat(1001), fake.user(1001, "Alice")
    first, second = (fake.inject_message(chat, user, text) for text in ("one", "two"))
    await bot.get_updates(offset=second["update_id"] + 1, timeout=0)  # both confirmed
    assert fake.pending_updates() == []
    fake.redeliver(second)
    fake.redeliver(first)
    again = await bot.get_updates(timeout=0)
    assert [(u.update_id, u.effective_message and u.effective_message.text) for u in again] == [
        (first["update_id"], "one"),
        (second["update_id"], "two"),
    ]


async def test_on_get_updates_sees_each_call_before_its_answer(
    fake: FakeTelegram, bot: Bot
) -> None:
    update = fake.inject_message(fake.private_chat(1001), fake.user(1001, "Alice"), "hi")
    seen: list[tuple[object, int]] = []

    async def look(params: dict[str, object]) -> None:
        seen.append((params.get("offset"), len(fake.pending_updates())))

    fake.on_get_updates = look
    await bot.get_updates(timeout=0)
    await bot.get_updates(offset=update["update_id"] + 1, timeout=0)
    # The second call is seen before it confirms the update: it is still pending then.
    assert seen == [(None, 1), (update["update_id"] + 1, 1)]
    assert fake.pending_updates() == []


async def test_on_answered_sees_each_call_once_it_has_its_status(
    fake: FakeTelegram, bot: Bot
) -> None:
    seen: list[tuple[str, int | None, bool]] = []
    fake.on_answered = lambda record: seen.append(
        (record.method, record.status, record in fake.call_log)
    )
    await bot.send_message(1001, "hi")
    fake.fail_next("sendMessage", 400, "Bad Request: chat not found")
    with pytest.raises(BadRequest):
        await bot.send_message(1001, "lost")
    assert seen == [("sendMessage", 200, True), ("sendMessage", 400, True)]


async def test_long_poll_wakes_on_injection(fake: FakeTelegram, bot: Bot) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=10, read_timeout=15))
    await fake.wait_until_polling(timeout=WAIT)
    update = fake.inject_message(fake.private_chat(1001), fake.user(1001, "Alice"), "wake")
    updates = await asyncio.wait_for(poll, WAIT)
    assert [u.update_id for u in updates] == [update["update_id"]]


async def test_delete_webhook_drops_pending_updates(fake: FakeTelegram, bot: Bot) -> None:
    fake.inject_message(fake.private_chat(1001), fake.user(1001, "Alice"), "old")
    await bot.delete_webhook(drop_pending_updates=True)
    assert await bot.get_updates(timeout=0) == ()


async def test_bad_fixture_fails_at_injection(fake: FakeTelegram) -> None:
    nameless = {"id": 5, "is_bot": False}
    with pytest.raises(ValueError, match="invalid update fixture"):
        fake.inject_message(fake.private_chat(5), nameless, "hi")
    with pytest.raises(ValueError, match="unknown"):
        fake.inject_update({"mesage": {}})
    assert fake.pending_updates() == []


# -- webhook mode ---------------------------------------------------------------------------------


async def test_webhook_delivery_and_conflict(fake: FakeTelegram, bot: Bot) -> None:
    received: asyncio.Queue[tuple[str | None, dict[str, object]]] = asyncio.Queue()

    async def hook(request: web.Request) -> web.Response:
        secret = request.headers.get("X-Telegram-Bot-Api-Secret-Token")
        await received.put((secret, await request.json()))
        return web.Response()

    receiver = web.Application()
    receiver.router.add_post("/tg-hook", hook)
    runner = web.AppRunner(receiver)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        url = f"http://127.0.0.1:{port}/tg-hook"
        await bot.set_webhook(url, secret_token="s3cret")
        assert (await bot.get_webhook_info()).url == url
        with pytest.raises(Conflict):
            await bot.get_updates(timeout=0)

        update = fake.inject_message(fake.private_chat(1001), fake.user(1001, "Alice"), "hooked")
        secret, body = await asyncio.wait_for(received.get(), WAIT)
        assert secret == "s3cret"
        assert body == update
        parsed = Update.de_json(body, bot)
        assert parsed.message is not None and parsed.message.text == "hooked"

        await bot.delete_webhook()
        assert fake.webhook is None
        assert await bot.get_updates(timeout=0) == ()
    finally:
        await runner.cleanup()
