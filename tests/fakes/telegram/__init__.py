"""A fake Telegram Bot API server for tests that drive the real python-telegram-bot client.

Point the client at it with::

    async with FakeTelegram() as fake:
        app = (
            ApplicationBuilder()
            .token(fake.token)
            .base_url(fake.base_url)
            .base_file_url(fake.base_file_url)
            .build()
        )

The server listens on 127.0.0.1 on a free port. It keeps just enough state for a bot to poll
for updates, send, edit and delete messages, answer callback queries, manage its command list,
upload and download files, and use a webhook. Tests feed it updates with the ``inject_*``
helpers and inspect what the bot did through ``calls``, ``sent_messages()`` and
``wait_for_call()``.

Not simulated: privacy mode in groups (every injected update is delivered), rate limits
(inject them with ``fail_next``), Markdown parse modes (text is stored as sent) and most
methods not listed in ``FakeTelegram._methods``: those answer 404.

One module per concern, each but the first two a layer of :class:`FakeTelegram`:

- ``entities``: HTML parse mode, automatic command and mention entities, UTF-16 lengths
- ``api``: form decoding, the ``{"ok": false}`` error body, the call record
- ``state``: chats and messages, test-side builders and inspection
- ``files``: getFile, downloads, file objects
- ``updates``: the injected update queue, getUpdates long-polls and webhook delivery
- ``methods``: the Bot API methods
- ``members``: chat administrators (getChatAdministrators, getChatMember)
- ``server``: ``FakeTelegram``, request routing and ``fail_next``
"""

from .api import ApiError, BotApiCall
from .entities import HtmlParseError, parse_html, utf16_len
from .server import FakeTelegram

__all__ = ["ApiError", "BotApiCall", "FakeTelegram", "HtmlParseError", "parse_html", "utf16_len"]
