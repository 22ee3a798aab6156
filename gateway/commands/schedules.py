"""/schedule, /schedules and /unschedule: a session's scheduled prompts from any front-end."""

from __future__ import annotations

from datetime import datetime

from gateway.auth import Access, NotAllowed
from gateway.commands.registry import Command, CommandCall, CommandRegistry, CommandReply
from gateway.schedule_spec import BadSchedule, parse_args, parse_zone
from gateway.schedules import NewSchedule, ScheduleNotFound, Schedules
from gateway.store.schedules import Schedule

PREVIEW_CHARS = 60
MAX_DIGITS = 12  # past any id the archive hands out, short of what SQL integers hold


class ScheduleCommands:
    def __init__(self, registry: CommandRegistry, schedules: Schedules) -> None:
        self.registry = registry
        self.schedules = schedules

    def register(self) -> None:
        add = self.registry.add
        add(
            Command(
                "schedule",
                "run a prompt here at times: cron or `every 30m`",
                Access.shared_admin,
                self.schedule,
                usage="<when> <prompt>",
            )
        )
        add(Command("schedules", "this session's schedules", Access.anyone, self.list))
        add(
            Command(
                "unschedule",
                "remove a schedule by its number",
                Access.shared_admin,
                self.unschedule,
                usage="<number>",
            )
        )

    async def schedule(self, call: CommandCall) -> CommandReply:
        try:
            args = parse_args(call.args)
            made = await self.schedules.create(
                call.session_id,
                call.origin,
                NewSchedule(args.spec.text, args.prompt, args.skip_missed, args.timezone),
            )
        except BadSchedule as exc:
            return CommandReply(call.name, f"⚠️ {exc}", ok=False)
        missed = "skipped" if made.skip_missed else "run once"
        return CommandReply(
            call.name,
            f"schedule #{made.id}: {made.spec} ({made.timezone}), next {when(made)}; "
            f"a time missed while the gateway is down is {missed}",
        )

    async def list(self, call: CommandCall) -> CommandReply:
        found = await self.schedules.of_session(call.session_id)
        if not found:
            return CommandReply(call.name, "no schedules here; /schedule <when> <prompt>")
        lines = [
            f"#{s.id}  {s.spec} ({s.timezone})  "
            + (f"SUSPENDED ({s.suspended_reason})" if s.suspended else f"next {when(s)}")
            + f"  {preview(s)}"
            for s in found
        ]
        return CommandReply(call.name, "\n".join(lines))

    async def unschedule(self, call: CommandCall) -> CommandReply:
        number = call.args.strip().lstrip("#")
        if not (number.isascii() and number.isdigit()) or len(number) > MAX_DIGITS:
            return CommandReply(call.name, "usage: /unschedule <number> (see /schedules)", False)
        try:
            await self.schedules.remove(call.session_id, call.origin, int(number))
        except ScheduleNotFound as exc:
            return CommandReply(call.name, str(exc), ok=False)
        except NotAllowed as exc:
            return CommandReply(call.name, str(exc), ok=False)
        return CommandReply(call.name, f"schedule #{number} removed")


def when(schedule: Schedule) -> str:
    """The next due time in the schedule's own time zone."""
    at = datetime.fromtimestamp(schedule.next_due_at / 1000, parse_zone(schedule.timezone))
    return at.strftime("%Y-%m-%d %H:%M %Z")


def preview(schedule: Schedule) -> str:
    line = " ".join(schedule.prompt.split())
    shown = line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"
    return f"“{shown}” by {schedule.created_by_name or schedule.created_by_id}"
