"""Named steps of a task's life where a test can make the gateway die on the spot.

`AGENVOY_CRASH_AT=<step>` (or `<step>:<n>`, the n-th time it is reached) makes the process
SIGKILL itself when it reaches that step — no clean-up, no flush, as a power cut or the OOM
killer would. Crash tests use it to stop a real gateway exactly between two writes instead of
guessing with sleeps. Unset, reaching a step costs a comparison.
"""

from __future__ import annotations

import os
import signal
from typing import Final

from gateway.logs import get_logger

log = get_logger(__name__)

STEPS: Final = frozenset(
    {
        "received",  # an adapter has the message, nothing stored yet
        "screened",  # the intake read the bans and let the sender in; nothing stored yet
        "admitted",  # quotas and budgets counted the message; nothing stored yet
        "committed",  # message and journal committed, its action.log line not written yet
        "stored",  # message and journal committed, nothing acknowledged yet
        "mid_batch",  # a group commit ran part of its batch's writes; none is committed
        "collected",  # waiting tasks were collected into the newest: their journals are gone
        "steered",  # messages are journaled as the running task's; its agent has not seen them
        "tool_started",  # the journal says the tool started; it has not run
        "tool_ran",  # the tool ran; its result is not journaled yet
        "answered",  # an answer is journaled; the one who gave it has not heard back
        "logged",  # a task's end is in action.log; its reply and run are not committed
        "recorded",  # the reply and the run are committed; nothing is delivered yet
        "part_sent",  # the platform accepted a part of a reply; the outbox does not know yet
        "scheduled",  # a schedule's task is stored; the schedule is not moved on yet
    }
)


class CrashPoints:
    def __init__(self, spec: str = "") -> None:
        step, _, count = spec.partition(":")
        if step and step not in STEPS:
            raise ValueError(f"unknown crash step {step!r}; known: {', '.join(sorted(STEPS))}")
        self.step = step
        self._left = int(count) if count else 1

    def reach(self, step: str) -> None:
        """Die here if this is the step (and the time) the test asked for."""
        if step != self.step:
            return
        self._left -= 1
        if self._left == 0:
            log.warning("crashing on purpose", step=step)
            os.kill(os.getpid(), signal.SIGKILL)


NO_CRASH = CrashPoints()
