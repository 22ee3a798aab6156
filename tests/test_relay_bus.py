"""A task's events go on the bus for the other instances only when the bus reaches them: on a
local bus the only listener is this instance, which ignores its own events."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from gateway.bus import Handler, LocalBus
from gateway.cluster.relay import EVENT, Relay
from gateway.events import DoneEvent

pytestmark = pytest.mark.fast


class RecordingBus:
    def __init__(self, reaches_others: bool) -> None:
        self.reaches_others = reaches_others
        self.sent: list[tuple[str, dict[str, Any], bool]] = []

    def on(self, topic: str, handler: Handler) -> None:
        pass

    def on_gap(self, handler: Any) -> None:
        pass

    async def publish(self, topic: str, message: dict[str, Any], *, keep: bool = False) -> None:
        self.sent.append((topic, message, keep))

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass


def _relay(bus: Any) -> Relay:
    unused = cast(Any, None)  # the parts publishing never touches
    return Relay(
        bus,
        tasks=unused,
        dispatch=unused,
        prompts=unused,
        store=unused,
        authority=unused,
        cancel_here=unused,
    )


@pytest.mark.parametrize("reaches_others", [True, False])
async def test_a_task_s_events_go_on_the_bus_only_when_another_instance_can_hear_them(
    reaches_others: bool,
) -> None:
    bus = RecordingBus(reaches_others)
    task = cast(Any, SimpleNamespace(task_hash="aaaaaaaaaaaaaaaa"))
    await _relay(bus).publish(task, DoneEvent(session_id="cli-a", text="hi"))
    if reaches_others:
        assert [(topic, keep) for topic, _, keep in bus.sent] == [(EVENT, True)]
        assert bus.sent[0][1]["task"] == "aaaaaaaaaaaaaaaa"
    else:
        assert bus.sent == []


def test_only_the_redis_bus_reaches_other_instances() -> None:
    from gateway.bus import RedisBus

    assert LocalBus.reaches_others is False
    assert RedisBus.reaches_others is True
