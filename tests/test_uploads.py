"""Files sent with a message over the HTTP API and from the chat window's `/attach`."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakes.openai import FakeOpenAI, Text, transcript_of
from test_http import Server, serving
from test_media import decoded, image_parts, last_text, openai_options, picture
from test_terminal import SIZE, config, opened, texts, type_and_send, until

from adapters.terminal.app import ChatApp
from adapters.terminal.attach import MAX_ATTACH_BYTES


@pytest.fixture
async def server(model: FakeOpenAI, tmp_path: Path) -> AsyncIterator[Server]:
    options = openai_options(model, transcribe_model="whisper-1", confirm_timeout_seconds=30)
    async with serving(tmp_path, **options) as srv:
        yield srv


def upload(name: str, data: bytes, mime: str) -> dict[str, str]:
    return {"name": name, "mime": mime, "data": base64.b64encode(data).decode()}


async def test_http_upload_reaches_the_model_and_the_workspace(
    server: Server, model: FakeOpenAI
) -> None:
    model.script(Text("a small square"))
    files = [
        upload("square.png", picture(16, 16), "image/png"),
        upload("memo.ogg", b"OggS m", "audio/ogg"),
    ]
    status, body = await server.call(
        "POST",
        "/v1/send",
        json_body={"content": "what is it", "persist": True, "attachments": files},
    )
    assert status == 200 and body["text"] == "a small square"
    [part] = image_parts(model.requests[-1])
    assert decoded(part["image_url"]["url"])[1].size == (16, 16)
    assert transcript_of(b"OggS m") in last_text(model.requests[-1])
    saved = server.runtime.store.files(body["session_id"]).dir / "workspace" / "attachments"
    assert sorted(p.name.split("_", 1)[1] for p in saved.iterdir()) == ["memo.ogg", "square.png"]


async def test_http_upload_that_is_not_base64_is_refused(server: Server, model: FakeOpenAI) -> None:
    bad = {"name": "x.png", "mime": "image/png", "data": "not base64!"}
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "hi", "attachments": [bad]}
    )
    assert status == 400 and "base64" in str(body)
    assert model.requests == []


async def test_too_long_message_with_a_file_leaves_no_file(server: Server) -> None:
    # Short enough alone; the line describing the file makes it too long.
    long = "x" * (server.runtime.settings.max_message_chars - 5)
    status, _ = await server.call(
        "POST",
        "/v1/send",
        json_body={
            "content": long,
            "session_id": "cli-up-long",
            "attachments": [upload("a.txt", b"a", "text/plain")],
        },
    )
    assert status in (400, 413, 422)
    assert not (server.runtime.store.files("cli-up-long").dir / "workspace").exists()


async def test_attach_in_the_chat_window(server: Server, model: FakeOpenAI, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    shot.write_bytes(picture(24, 12))
    model.script(Text("a wide picture"))
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        await type_and_send(pilot, f"/attach {tmp_path / 'missing.png'}")
        await until(pilot, lambda: any("cannot read" in t for t in texts(app)))
        big = tmp_path / "big.bin"
        big.write_bytes(b"x" * (MAX_ATTACH_BYTES + 1))
        await type_and_send(pilot, f"/attach {big}")
        await until(pilot, lambda: any("too large" in t for t in texts(app)))
        await type_and_send(pilot, f"/attach {shot}")
        await until(pilot, lambda: any("attached shot.png (image/png" in t for t in texts(app)))
        await type_and_send(pilot, "what is this")
        await until(pilot, lambda: "a wide picture" in texts(app))
    [part] = image_parts(model.requests[-1])
    assert decoded(part["image_url"]["url"])[1].size == (24, 12)
    assert "what is this" in last_text(model.requests[-1])
    assert len(model.requests) == 1  # the refused files went nowhere
