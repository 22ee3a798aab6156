"""A message's typing indicator (adapters/chat/indicator.py): shown once its task has worked
`TYPING_AFTER` seconds without answering, never for a reply that came sooner."""

from __future__ import annotations

import asyncio
from pathlib import Path

from clock import FakeClock
from fakes.telegram import FakeTelegram
from telegram_rig import last_task_of, reply_in, running

from adapters.chat.indicator import TYPING_AFTER, TypingSoon
from gateway.events import Origin

ANN = Origin("telegram", channel_id="181", sender_id="181", sender_name="Ann")


class Shown(list[str]):
    """The channels an indicator was shown in; `one` is set at the first."""

    def __init__(self) -> None:
        super().__init__()
        self.one = asyncio.Event()


def _indicator(clock: FakeClock) -> tuple[TypingSoon, Shown]:
    shown = Shown()

    async def show(origin: Origin) -> None:
        shown.append(origin.channel_id)
        shown.one.set()

    return TypingSoon(clock, show), shown


async def test_a_task_that_answers_within_a_moment_shows_no_indicator() -> None:
    clock = FakeClock()
    soon, shown = _indicator(clock)
    soon.after_a_moment(ANN, "t1")
    await clock.until_sleeping(seconds=TYPING_AFTER)
    soon.answered("t1")
    await clock.advance(TYPING_AFTER * 3)
    await asyncio.sleep(0)
    assert shown == []


async def test_a_task_still_at_work_after_a_moment_shows_it_once() -> None:
    clock = FakeClock()
    soon, shown = _indicator(clock)
    soon.after_a_moment(ANN, "t1")
    soon.after_a_moment(ANN, "t1")  # the same task's user event delivered twice
    await clock.until_sleeping(seconds=TYPING_AFTER)
    await clock.advance(TYPING_AFTER / 2)
    await asyncio.sleep(0)
    assert shown == []
    await clock.advance(TYPING_AFTER / 2)
    await asyncio.wait_for(shown.one.wait(), 5)
    assert shown == ["181"]
    soon.answered("t1")  # an answer after it was shown changes nothing
    await clock.advance(TYPING_AFTER * 3)
    assert shown == ["181"]


async def test_at_stop_the_waiting_indicators_are_not_shown() -> None:
    clock = FakeClock()
    soon, shown = _indicator(clock)
    soon.after_a_moment(ANN, "t1")
    soon.after_a_moment(ANN, "t2")
    await clock.until_sleeping(2, seconds=TYPING_AFTER)
    await soon.close()
    await clock.advance(TYPING_AFTER * 3)
    await asyncio.sleep(0)
    assert shown == []


async def test_an_echo_is_sent_without_a_typing_call_before_it(
    telegram: FakeTelegram, tmp_path: Path
) -> None:
    async with running(telegram, tmp_path / "home") as rig:
        # The indicator's moment on a clock of the test's own: a machine slow enough to take
        # `TYPING_AFTER` over the echo would rightly show it.
        clock = FakeClock()
        rig.adapter._typing_soon = TypingSoon(clock, rig.adapter.typing)
        chat, ann = rig.fake.private_chat(11), rig.fake.user(11, "Ann")
        rig.fake.inject_message(chat, ann, "hello bot")
        await reply_in(rig.fake, 11, "echo: hello bot")
        state = await rig.runtime.router.wait(await last_task_of(rig, "tg-11"), 10)
        assert state.status == "done"
        # Nor after it: the reply called the indicator off, so no moment later shows it.
        await clock.advance(TYPING_AFTER * 3)
        await asyncio.sleep(0)
        assert rig.fake.calls_to("sendChatAction") == []
