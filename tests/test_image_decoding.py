"""What decoding a message's images may cost: memory, bounded by a budget (a JPEG decoded at a
reduced scale, anything else refused before it is decoded), and how many decode at once."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fakes.openai import FakeOpenAI, Text
from fakes.telegram import FakeTelegram
from PIL import Image
from support import wait_until
from telegram_rig import reply_in, running

from gateway.agents import images
from gateway.agents.images import Limits, Picture
from gateway.agents.openai import OpenAIAgent

ROOT = Path(__file__).parents[1]
BUDGET = 64 * 2**20
# Decodes `argv[1]` as the gateway does and prints how far the process's peak memory rose:
# ru_maxrss is a high-water mark, so the file is made by the test, never here.
MEASURE = """
import json, resource, sys
from gateway.agents.images import Limits, Unreadable, prepare
data = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    picture = prepare("big", data, Limits(1568, 3_932_160, int(sys.argv[2])))
    outcome = {"size": [picture.width, picture.height], "type": picture.media_type}
except Unreadable as exc:
    outcome = {"refused": str(exc)}
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"grown": grown * 1024, **outcome}))
"""


def decode_in_a_process(path: Path, budget: int) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path), str(budget)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def saved(image: Image.Image, kind: str, path: Path) -> Path:
    out = io.BytesIO()
    image.save(out, kind)
    path.write_bytes(out.getvalue())
    return path


def test_a_small_png_claiming_49_megapixels_is_refused_before_it_is_decoded(
    tmp_path: Path,
) -> None:
    # A few kilobytes that decode to 49 megapixels, then to three times that as RGB.
    bomb = saved(Image.new("1", (7000, 7000)), "PNG", tmp_path / "bomb.png")
    assert bomb.stat().st_size < 20_000
    result = decode_in_a_process(bomb, BUDGET)
    assert "would take" in str(result.get("refused")), result
    assert "more than the 64 MiB allowed" in str(result["refused"])
    assert isinstance(result["grown"], int) and result["grown"] < BUDGET, result


def test_a_48_megapixel_jpeg_is_decoded_scaled_down_within_the_budget(tmp_path: Path) -> None:
    photo = saved(Image.new("L", (8000, 6000), 128), "JPEG", tmp_path / "photo.jpg")
    assert photo.stat().st_size < 1_000_000
    result = decode_in_a_process(photo, BUDGET)
    assert result.get("size") == [1568, 1176] and result["type"] == "image/jpeg", result
    assert isinstance(result["grown"], int) and result["grown"] < BUDGET, result


def test_a_picture_within_the_budget_is_decoded_whole(tmp_path: Path) -> None:
    screenshot = saved(Image.new("RGB", (3000, 2000), (9, 99, 199)), "PNG", tmp_path / "s.png")
    result = decode_in_a_process(screenshot, BUDGET)
    assert result.get("size") == [1568, 1045] and result["type"] == "image/png", result


class Watch:
    """Counts the decodes running at once, in the threads that run them, and holds each until
    the test lets them go."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.go = threading.Event()
        self.now = self.most = self.done = 0

    def prepare(self, name: str, data: bytes, limits: Limits) -> Picture:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            self.go.wait(30)
            return PREPARE(name, data, limits)
        finally:
            with self.lock:
                self.now -= 1
                self.done += 1


PREPARE = images.prepare


async def test_concurrent_decodes_never_exceed_the_setting(
    telegram: FakeTelegram, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch, limit, chats = Watch(), 2, range(401, 407)
    monkeypatch.setattr(images, "prepare", watch.prepare)
    photo = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 40, 40)).save(photo, "PNG")
    async with FakeOpenAI() as model:
        options = {**model.agent_settings("vision-model"), "image_decode_concurrency": limit}
        async with running(telegram, tmp_path / "home", **options) as rig:
            agent = rig.runtime.agent
            assert isinstance(agent, OpenAIAgent)
            gate = agent.decodes
            model.script(*[Text("seen") for _ in chats])
            for chat in chats:
                telegram.inject_message(
                    telegram.private_chat(chat),
                    telegram.user(chat, f"U{chat}"),
                    "look",
                    photo=photo.getvalue(),
                )

            async def settled() -> bool:
                # Either one too many got in, or the rest queue at the gate.
                return watch.most > limit or (
                    watch.now == limit and gate.waiting == len(chats) - limit
                )

            assert await wait_until(settled, 15)
            assert watch.most == limit
            watch.go.set()
            await asyncio.gather(*(reply_in(telegram, chat, "seen", 20) for chat in chats))
    assert watch.done == len(chats) and watch.most == limit
    assert all(image_parts(request) for request in model.requests)


def image_parts(request: dict[str, object]) -> list[object]:
    messages = request["messages"]
    assert isinstance(messages, list)
    content = messages[-1]["content"]
    return [p for p in content if p.get("type") == "image_url"] if isinstance(content, list) else []
