"""Images and voice notes posted through the fake Telegram and Discord servers, as the fake
model servers receive them."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import pytest
from discord_rig import ANN as DISCORD_ANN
from discord_rig import DM
from discord_rig import reply_in as discord_reply_in
from discord_rig import running as discord_running
from fakes.anthropic import FakeAnthropic
from fakes.anthropic import Text as ClaudeText
from fakes.discord import FakeDiscord, point_discord_py_at
from fakes.openai import Error, FakeOpenAI, Text, ToolCalls, transcript_of
from fakes.telegram import FakeTelegram
from PIL import Image
from telegram_rig import Rig, reply_in, running

from gateway.agents.images import Limits, Unreadable, prepare
from gateway.events import Attachment, Inbound, Origin
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.sessions import StoredMessage

LIMITS = Limits(max_side=1568, max_bytes=3_000_000, decode_budget=2**28)


def openai_options(model: FakeOpenAI, **extra: Any) -> dict[str, Any]:
    return {**model.agent_settings("vision-model"), **extra}


def picture(width: int, height: int, kind: str = "PNG", *, noise: bool = False) -> bytes:
    image = Image.new("RGB", (width, height), (200, 40, 40))
    if noise:
        image = Image.frombytes("RGB", (width, height), _noise(width * height * 3))
    out = io.BytesIO()
    image.save(out, kind)
    return out.getvalue()


def _noise(size: int) -> bytes:
    # Deterministic bytes that do not compress: a picture that stays large as PNG or JPEG.
    seed, out = 12345, bytearray()
    while len(out) < size:
        seed = (seed * 1103515245 + 12345) % 2**31
        out += seed.to_bytes(4, "little")
    return bytes(out[:size])


def image_parts(request: dict[str, Any]) -> list[dict[str, Any]]:
    content = request["messages"][-1]["content"]
    return [p for p in content if p.get("type") == "image_url"] if isinstance(content, list) else []


def last_text(request: dict[str, Any]) -> str:
    content = request["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if p.get("type") == "text")


async def first_message(rig: Rig, session_id: str) -> StoredMessage:
    return (await rig.runtime.store.recent_messages(session_id))[0]


def decoded(data_url: str) -> tuple[str, Image.Image]:
    head, data = data_url.split(",", 1)
    media_type = head.removeprefix("data:").removesuffix(";base64")
    return media_type, Image.open(io.BytesIO(base64.b64decode(data)))


async def test_telegram_photo_reaches_the_model_as_an_image_part(
    telegram: FakeTelegram, model: FakeOpenAI, tmp_path: Path
) -> None:
    async with running(telegram, tmp_path / "home", **openai_options(model)):
        model.script(Text("a red square"))
        telegram.inject_message(
            telegram.private_chat(301),
            telegram.user(301, "Ann"),
            "what is this",
            photo=picture(40, 30),
        )
        await reply_in(telegram, 301, "a red square")
    request = model.requests[-1]
    [part] = image_parts(request)
    media_type, image = decoded(part["image_url"]["url"])
    # Telegram calls every photo image/jpeg; what goes out is what the bytes are.
    assert media_type == "image/png" and image.size == (40, 30)
    assert "what is this" in last_text(request) and "photo.jpg" in last_text(request)


async def test_oversized_image_arrives_scaled_down(
    telegram: FakeTelegram, model: FakeOpenAI, tmp_path: Path
) -> None:
    options = openai_options(model, image_max_side=256)
    async with running(telegram, tmp_path / "home", **options):
        model.script(Text("seen"))
        telegram.inject_message(
            telegram.private_chat(302), telegram.user(302, "Ann"), "big", photo=picture(1000, 500)
        )
        await reply_in(telegram, 302, "seen")
    [part] = image_parts(model.requests[-1])
    _, image = decoded(part["image_url"]["url"])
    assert image.size == (256, 128)


async def test_corrupt_image_is_a_clear_line_and_the_task_answers(
    telegram: FakeTelegram, model: FakeOpenAI, tmp_path: Path
) -> None:
    async with running(telegram, tmp_path / "home", **openai_options(model)):
        model.script(Text("I could not open it"))
        telegram.inject_message(
            telegram.private_chat(303), telegram.user(303, "Ann"), "look", photo=b"\x89PNG junk"
        )
        await reply_in(telegram, 303, "I could not open it")
    request = model.requests[-1]
    assert image_parts(request) == []
    assert "could not be read as an image" in last_text(request)


async def test_model_without_vision_gets_the_describing_line(
    telegram: FakeTelegram, model: FakeOpenAI, tmp_path: Path
) -> None:
    options = openai_options(model, text_only_models="other, vision-*")
    async with running(telegram, tmp_path / "home", **options):
        model.script(Text("described"))
        telegram.inject_message(
            telegram.private_chat(304), telegram.user(304, "Ann"), "see", photo=picture(20, 20)
        )
        await reply_in(telegram, 304, "described")
    request = model.requests[-1]
    assert isinstance(request["messages"][-1]["content"], str)
    assert "[attachment: " in last_text(request) and "saved as workspace/attachments/" in last_text(
        request
    )


async def test_older_images_are_not_sent_again(
    telegram: FakeTelegram, model: FakeOpenAI, tmp_path: Path
) -> None:
    async with running(telegram, tmp_path / "home", **openai_options(model)):
        model.script(Text("one"), Text("two"))
        chat, ann = telegram.private_chat(305), telegram.user(305, "Ann")
        telegram.inject_message(chat, ann, "first", photo=picture(10, 10))
        await reply_in(telegram, 305, "one")
        telegram.inject_message(chat, ann, "and now?")
        await reply_in(telegram, 305, "two")
    messages = model.requests[-1]["messages"]
    assert all(isinstance(m["content"], str) for m in messages)
    assert any("photo.jpg" in m["content"] for m in messages[:-1])


async def test_claude_agent_gets_an_image_block(telegram: FakeTelegram, tmp_path: Path) -> None:
    async with FakeAnthropic() as claude:
        options = {
            "agent": "claude",
            "anthropic_base_url": claude.url,
            "anthropic_api_key": claude.api_key,
            "anthropic_model": "claude-test",
        }
        async with running(telegram, tmp_path / "home", **options):
            claude.script(ClaudeText("a picture"))
            telegram.inject_message(
                telegram.private_chat(306), telegram.user(306, "Ann"), "hm", photo=picture(30, 20)
            )
            await reply_in(telegram, 306, "a picture")
        blocks = claude.requests[-1]["messages"][-1]["content"]
    [image] = [b for b in blocks if b["type"] == "image"]
    assert image["source"]["type"] == "base64" and image["source"]["media_type"] == "image/png"
    shown = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
    assert shown.size == (30, 20)
    assert blocks[0]["type"] == "text" and "hm" in blocks[0]["text"]


async def test_discord_image_reaches_the_model(model: FakeOpenAI, tmp_path: Path) -> None:
    async with FakeDiscord() as discord_fake:
        discord_fake.dm_channel(DM, DISCORD_ANN)
        with point_discord_py_at(discord_fake):
            async with discord_running(discord_fake, tmp_path / "home", **openai_options(model)):
                model.script(Text("nice screenshot"))
                discord_fake.inject_message(
                    DM,
                    DISCORD_ANN,
                    "look",
                    guild_id=None,
                    attachments=[("shot.webp", picture(64, 48, "WEBP"), "image/webp")],
                )
                await discord_reply_in(discord_fake, DM, "nice screenshot")
    [part] = image_parts(model.requests[-1])
    media_type, image = decoded(part["image_url"]["url"])
    assert media_type == "image/webp" and image.size == (64, 48)


async def test_voice_note_transcript_is_archived_searchable_and_sent(
    telegram: FakeTelegram, model: FakeOpenAI, tmp_path: Path
) -> None:
    options = openai_options(model, transcribe_model="whisper-1")
    async with running(telegram, tmp_path / "home", **options) as rig:
        model.script(Text("heard you"))
        model.script_transcripts("please water the ficus on tuesday")
        telegram.inject_message(
            telegram.private_chat(307), telegram.user(307, "Ann"), "", voice=b"OggS opus bytes"
        )
        await reply_in(telegram, 307, "heard you")
        [upload] = model.transcriptions
        assert upload["model"] == "whisper-1" and upload["file"] == b"OggS opus bytes"
        assert upload["type"] == "audio/ogg"
        stored = await first_message(rig, "tg-307")
        line = "[voice note transcript, "
        assert line in stored.content and "please water the ficus on tuesday" in stored.content
        hits = await rig.runtime.store.search.messages("ficus", session_id="tg-307")
        assert [h.id for h in hits] == [stored.id]
    assert "please water the ficus on tuesday" in last_text(model.requests[-1])


async def test_failed_transcription_keeps_the_message_with_a_note(
    telegram: FakeTelegram, model: FakeOpenAI, tmp_path: Path
) -> None:
    options = openai_options(model, transcribe_model="whisper-1")
    async with running(telegram, tmp_path / "home", **options) as rig:
        model.script(Text("no words"))
        model.script_transcripts(Error(500, "the transcriber fell over"))
        telegram.inject_message(
            telegram.private_chat(308), telegram.user(308, "Ann"), "listen", voice=b"OggS x"
        )
        await reply_in(telegram, 308, "no words")
        stored = await first_message(rig, "tg-308")
    assert stored.content.startswith("listen\n[attachment: ")
    assert "could not be transcribed: HTTP 500: the transcriber fell over" in stored.content
    assert "voice.ogg" in stored.content
    assert "could not be transcribed" in last_text(model.requests[-1])
    assert transcript_of(b"OggS x") not in stored.content


async def test_no_transcription_unless_a_model_is_set(
    telegram: FakeTelegram, model: FakeOpenAI, tmp_path: Path
) -> None:
    async with running(telegram, tmp_path / "home", **openai_options(model)) as rig:
        model.script(Text("ok"))
        telegram.inject_message(
            telegram.private_chat(309), telegram.user(309, "Ann"), "hi", voice=b"OggS y"
        )
        await reply_in(telegram, 309, "ok")
        stored = await first_message(rig, "tg-309")
    assert model.transcriptions == []
    assert "voice.ogg" in stored.content and "[voice note" not in stored.content


def test_image_too_heavy_in_bytes_is_reencoded_to_fit() -> None:
    data = picture(300, 300, noise=True)
    assert len(data) > 30_000
    shown = prepare("noise.png", data, Limits(1568, 30_000, 2**28))
    assert len(shown.data) <= 30_000 and shown.media_type == "image/jpeg"
    assert shown.width < 300  # even as a JPEG it had to be made smaller


def test_decompression_bomb_is_refused_before_decoding() -> None:
    out = io.BytesIO()
    Image.new("1", (9000, 9000)).save(out, "PNG")  # a few kB claiming 81 megapixels
    with pytest.raises(Unreadable, match="more than it is allowed to decode"):
        prepare("bomb.png", out.getvalue(), LIMITS)


def test_unsupported_type_is_converted_to_png() -> None:
    shown = prepare("scan.bmp", picture(50, 40, "BMP"), LIMITS)
    assert shown.media_type == "image/png" and (shown.width, shown.height) == (50, 40)


def test_image_cut_short_is_refused() -> None:
    whole = picture(200, 200, noise=True)
    with pytest.raises(Unreadable, match="not a picture this gateway can decode"):
        prepare("cut.png", whole[: len(whole) // 2], LIMITS)


async def test_discord_voice_message_is_transcribed(model: FakeOpenAI, tmp_path: Path) -> None:
    options = openai_options(model, transcribe_model="whisper-1")
    async with FakeDiscord() as discord_fake:
        discord_fake.dm_channel(DM, DISCORD_ANN)
        with point_discord_py_at(discord_fake):
            async with discord_running(discord_fake, tmp_path / "home", **options) as rig:
                model.script(Text("got it"))
                discord_fake.inject_message(
                    DM,
                    DISCORD_ANN,
                    "",
                    guild_id=None,
                    attachments=[("voice-message.ogg", b"OggS discord", "audio/ogg")],
                )
                await discord_reply_in(discord_fake, DM, "got it")
                stored = (await rig.runtime.store.recent_messages(f"dc-{DM}"))[0]
    assert "[voice note transcript, " in stored.content
    assert transcript_of(b"OggS discord") in stored.content


async def test_telegram_audio_file_is_transcribed(
    telegram: FakeTelegram, model: FakeOpenAI, tmp_path: Path
) -> None:
    options = openai_options(model, transcribe_model="whisper-1")
    async with running(telegram, tmp_path / "home", **options) as rig:
        model.script(Text("minutes noted"))
        telegram.inject_message(
            telegram.private_chat(310),
            telegram.user(310, "Ann"),
            "meeting",
            audio=("meeting.mp3", b"ID3 mp3 bytes", "audio/mpeg"),
        )
        await reply_in(telegram, 310, "minutes noted")
        stored = await first_message(rig, "tg-310")
    [upload] = model.transcriptions
    assert upload["filename"].endswith("meeting.mp3") and upload["type"] == "audio/mpeg"
    assert transcript_of(b"ID3 mp3 bytes") in stored.content


async def test_image_sent_while_a_tool_waits_is_shown_when_steered(
    model: FakeOpenAI, tmp_path: Path
) -> None:
    settings = Settings(_env_file=None, home=tmp_path / "home", **openai_options(model))
    runtime = await Runtime.start(settings)
    ann = Origin("http", sender_id="ann", sender_name="Ann")
    try:
        router, sid = runtime.router, "cli-steer-image"
        await router.submit(Inbound(ann, sid, "/queue steer"))
        model.script(
            ToolCalls([("w1", "write_file", {"name": "plan.md", "content": "x"})]), Text("ok")
        )
        sub = await router.submit(Inbound(ann, sid, "write the plan"))
        await router.wait(sub.task_hash, 15, until_prompt=True)
        folder = runtime.store.files(sid).dir / "workspace" / "attachments"
        folder.mkdir(parents=True)
        (folder / "late.png").write_bytes(picture(12, 8))
        late = Attachment("late.png", "image/png", 10, "workspace/attachments/late.png")
        await router.submit(Inbound(ann, sid, "and this", (late,)))
        await router.answer(sid, sub.task_hash, ann, approve=True)
        assert (await router.wait(sub.task_hash, 15)).reply == "ok"
    finally:
        await runtime.close()
    [part] = image_parts(model.requests[-1])
    assert decoded(part["image_url"]["url"])[1].size == (12, 8)
