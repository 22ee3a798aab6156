"""When a schedule is due: an interval (`every 30m`) or a cron expression (five fields, or a
macro such as `@daily`) read in a time zone, and how `/schedule` arguments are read.

Cron expressions are evaluated by `cronsim`, which handles the days a time zone's clocks move
(a 02:30 that does not exist is skipped, one that happens twice runs once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

MINUTE_MS: Final = 60_000
_UNITS: Final = {"s": 1000, "m": MINUTE_MS, "h": 60 * MINUTE_MS, "d": 24 * 60 * MINUTE_MS}
# A schedule is work the agent does for people; more often than once a minute is a loop.
MIN_INTERVAL_MS: Final = MINUTE_MS
MAX_INTERVAL_MS: Final = 366 * _UNITS["d"]
_INTERVAL: Final = re.compile(r"every\s+(\d{1,6})\s*([smhd])", re.IGNORECASE)
_MACROS: Final = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
CRON_FIELDS: Final = 5
MAX_SPEC_CHARS: Final = 200  # what the table keeps
MAX_SHOWN: Final = 64  # of a refused name, in the message saying so
HOW: Final = "five cron fields (`0 9 * * *`), a macro (`@daily`) or an interval (`every 30m`)"


class BadSchedule(ValueError):
    """A spec, time zone or prompt that cannot make a schedule; the message says why."""


@dataclass(frozen=True, slots=True)
class Spec:
    text: str  # as stored and shown: "every 30m", "0 9 * * 1-5", "@daily"
    interval_ms: int = 0  # for an interval; 0 for a cron expression
    cron: str = ""  # the five fields of a cron expression (a macro expanded)

    def next_after(self, after_ms: int, zone: ZoneInfo, *, due_ms: int | None = None) -> int:
        """The first due time strictly after `after_ms`. An interval keeps its phase: the
        next time is `due_ms` plus a whole number of intervals (the creation time stands in
        for `due_ms` when there is none yet)."""
        if self.interval_ms:
            base = after_ms if due_ms is None else due_ms
            steps = max(0, (after_ms - base) // self.interval_ms) + 1
            return base + steps * self.interval_ms
        start = datetime.fromtimestamp(after_ms / 1000, zone)
        try:
            return int(next(CronSim(self.cron, start)).timestamp() * 1000)
        except StopIteration:  # a date that never comes (`0 0 30 2 *`)
            raise BadSchedule(f"{self.text!r} never comes due") from None


def parse_spec(text: str) -> Spec:
    """A spec as `/schedule` and the HTTP API take it; raises BadSchedule."""
    stripped = " ".join(text.split())
    if len(stripped) > MAX_SPEC_CHARS:
        raise BadSchedule(f"a spec is at most {MAX_SPEC_CHARS} characters")
    interval = _INTERVAL.fullmatch(stripped)
    if interval is not None:
        count, unit = int(interval.group(1)), interval.group(2).lower()
        ms = count * _UNITS[unit]
        if not MIN_INTERVAL_MS <= ms <= MAX_INTERVAL_MS:
            raise BadSchedule(f"{stripped!r}: an interval is between 1m and 366d")
        return Spec(f"every {count}{unit}", interval_ms=ms)
    if stripped.lower().startswith("every"):
        raise BadSchedule(f"{stripped!r}: an interval is a number and m, h or d (`every 30m`)")
    cron = _MACROS.get(stripped.lower(), stripped)
    if len(cron.split()) != CRON_FIELDS:
        raise BadSchedule(f"not a schedule: {stripped!r}; use {HOW}")
    try:
        # Building the iterator checks the fields; asking for one time checks it can come.
        next(CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC)))
    except CronSimError as exc:
        raise BadSchedule(f"not a cron expression: {stripped!r} ({exc}); use {HOW}") from None
    except StopIteration:
        raise BadSchedule(f"{stripped!r} never comes due") from None
    return Spec(stripped.lower() if stripped.startswith("@") else stripped, cron=cron)


def parse_zone(name: str) -> ZoneInfo:
    """An IANA time zone by name (`Europe/Paris`, `UTC`); raises BadSchedule."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        shown = name if len(name) <= MAX_SHOWN else name[:MAX_SHOWN] + "…"
        raise BadSchedule(f"unknown time zone {shown!r} (e.g. UTC, Europe/Paris)") from None


@dataclass(frozen=True, slots=True)
class ScheduleArgs:
    """What follows `/schedule`: options, the spec, and the prompt."""

    spec: Spec
    prompt: str
    skip_missed: bool = False
    timezone: str | None = None  # None: the gateway's default


def parse_args(args: str) -> ScheduleArgs:
    """`[--skip-missed] [--tz ZONE] <spec> <prompt>`; raises BadSchedule."""
    rest = args.strip()
    skip, zone = False, None
    while rest.startswith("--"):
        option, _, rest = rest.partition(" ")
        rest = rest.lstrip()
        name, _, value = option.partition("=")
        if name == "--skip-missed" and not value:
            skip = True
        elif name == "--tz":
            if not value:
                value, _, rest = rest.partition(" ")
                rest = rest.lstrip()
            zone = value
        else:
            shown = option if len(option) <= MAX_SHOWN else option[:MAX_SHOWN] + "…"
            raise BadSchedule(f"unknown option {shown!r}; options: --skip-missed, --tz ZONE")
    words = rest.split(maxsplit=CRON_FIELDS)
    if not words:
        raise BadSchedule(f"usage: /schedule [--skip-missed] [--tz ZONE] <when> <prompt>; {HOW}")
    if words[0].lower() == "every":
        taken = 2 if len(words) > 1 and not words[1].isdigit() else 3
    elif words[0].startswith("@"):
        taken = 1
    else:
        taken = CRON_FIELDS
    spec = parse_spec(" ".join(words[:taken]))
    prompt = rest.split(maxsplit=taken)[taken:]
    if not prompt or not prompt[0].strip():
        raise BadSchedule(f"what should run at {spec.text!r}? give a prompt after it")
    return ScheduleArgs(spec, prompt[0].strip(), skip, zone)
