"""One task's life: the agent runs with the session's context, its steps become events, its
tools run once (journaled around the call), and its end is recorded — reply, run, outbox
entry — in one transaction before anyone hears of it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial

from gateway.agents.base import (
    Agent,
    AgentFailed,
    BudgetReached,
    Delta,
    Reply,
    Step,
    Switched,
    ToolCall,
    ToolResult,
    Usage,
    closing,
)
from gateway.agents.tool_memory import ToolMemory
from gateway.crash import NO_CRASH, CrashPoints
from gateway.engine.context import Steer, load_context
from gateway.engine.dispatch import Dispatch
from gateway.engine.errors import QuotaExceeded
from gateway.engine.journal import ToolFinished, ToolStarted
from gateway.engine.prompts import Prompts
from gateway.engine.subagents import Subagents
from gateway.engine.task import Task
from gateway.events import (
    CanceledEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from gateway.knowledge.service import Knowledge
from gateway.logs import get_logger
from gateway.memory.recall import Recall
from gateway.presence import Presence
from gateway.prices import READS_APART, PriceTable
from gateway.profiles.agents import AgentPool, Chosen
from gateway.store.errors import until_available
from gateway.store.sessions import RunRecord, SessionStore
from gateway.store.usage import UsageRecord

# Asks whether an identity's budgets, and a shared chat's, hold (Admission.recheck); raises
# QuotaExceeded when one is spent.
Recheck = Callable[[str, str, Mapping[str, int]], Awaitable[None]]

log = get_logger(__name__)


class Runner:
    def __init__(
        self,
        store: SessionStore,
        agent: Agent,
        presence: Presence,
        dispatch: Dispatch,
        prompts: Prompts,
        counters: dict[str, int],
        window: int,
        crash: CrashPoints = NO_CRASH,
        tool_memory: ToolMemory | None = None,
        *,
        steer: Steer | None = None,
        max_subagent_depth: int = 0,
        max_subagents_per_task: int = 0,
        after_task: Sequence[Callable[[str], None]] = (),
        recall: Recall | None = None,
        knowledge: Knowledge | None = None,
        recheck: Recheck | None = None,
        prices: PriceTable | None = None,
        agents: AgentPool | None = None,
    ) -> None:
        """`max_subagent_depth`: how deep subagents may nest (0: none);
        `max_subagents_per_task`: how many one task may start; `recheck`: the budgets asked
        before each model call; `prices`: what each model call's usage row says it cost;
        `agents`: the agent of each task's profile (None: `agent` answers every task)."""
        self.store = store
        self.recheck = recheck
        self.prices = prices
        self.subagents = Subagents(
            store,
            agent,
            presence,
            dispatch.offer,
            max_depth=max_subagent_depth,
            max_per_task=max_subagents_per_task,
            priced=self.priced,
        )
        self.tool_memory = tool_memory
        self.agent = agent
        self.agents = agents
        self._agent_of: dict[str, Agent] = {}  # task hash → its profile's agent, while it runs
        self.presence = presence
        self.dispatch = dispatch
        self.prompts = prompts
        self.counters = counters
        self.window = window
        self.crash = crash
        self.steer = steer
        # Called with the session id after a task that finished with a reply when its context
        # said a summary fold may be due (the rolling summary hooks in here, off the reply
        # path; it checks again before it folds).
        self.after_task = list(after_task)
        # Older messages and attached documents' passages for each task's context (None: none).
        self.recall = recall
        self.knowledge = knowledge

    async def run(self, task: Task) -> None:
        self.counters["tasks_started"] += 1
        # With the instance bound in the log context, these two lines show which instance ran
        # what when (several instances never run one session's tasks at the same time).
        log.info("task started", session=task.session_id, task=task.task_hash)
        try:
            async with contextlib.AsyncExitStack() as held:
                await self._run_held(task, held)
        finally:
            log.info("task ended", session=task.session_id, task=task.task_hash, status=task.status)

    async def _run_held(self, task: Task, held: contextlib.AsyncExitStack) -> None:
        """The task's run, with what it holds until it ends (its subagents' sessions) released
        by `held`."""
        fold_soon = False
        try:
            await task.set_status("running")
            # The journal written at submission already holds all a replay needs until a step.
            # Nothing has happened yet that a wait would hold up: an unreachable database is
            # waited out here rather than end the task in an error.
            chosen = await until_available(
                lambda: self._chosen(task, held),
                sleep=self.dispatch.courier.clock.sleep,
                what="task waiting for its profile",
            )
            agent, window = chosen.agent, chosen.window(self.window)
            context = await until_available(
                lambda: load_context(
                    task,
                    self.store,
                    self.prompts,
                    self.run_tool,
                    window,
                    self.tool_memory,
                    steer=self.steer,
                    subagents=self.subagents,
                    recall=self.recall,
                    knowledge=self.knowledge,
                    profile=chosen.profile_name,
                    # Only an agent that shows recalled messages to its model pays for them.
                    recall_into_context=agent.reads_recall,
                ),
                sleep=self.dispatch.courier.clock.sleep,
                what="task waiting for its context",
            )
            held.push_async_exit(context.cleanup)
            chosen.apply(context)
            context.agent = agent
            fold_soon = context.fold_soon
            context.budget = lambda: self._within_budget(task, chosen.budgets)
            async with (
                self.presence.hold(task.session_id, task.task_hash),
                closing(agent.run(context)) as steps,
            ):
                async for step in steps:
                    await self._step(task, step)
        except asyncio.CancelledError:
            if task.canceled_by:
                await self.finish_canceled(task)
                return
            await task.set_status("interrupted")
            raise
        except AgentFailed as exc:
            await self._finish_error(task, str(exc))
            return
        except BudgetReached as exc:
            # Between model calls: every tool the run started has finished. The run ends as
            # answered, telling the member which budget and when it resets.
            log.info("task stopped at a budget", session=task.session_id, task=task.task_hash)
            await task.set_reply(str(exc))
            await self._finish_done(task, fold_soon=False)
            return
        except Exception as exc:
            log.exception("task crashed", session=task.session_id, task=task.task_hash)
            await self._finish_error(task, f"internal error: {type(exc).__name__}")
            return
        await self._finish_done(task, fold_soon=fold_soon)

    async def _chosen(self, task: Task, held: contextlib.AsyncExitStack) -> Chosen:
        """The agent of the task's profile, held until the task ends."""
        if self.agents is None:
            return Chosen(self.agent, None)
        chosen = await held.enter_async_context(self.agents.lease(task.session_id, task.origin))
        self._agent_of[task.task_hash] = chosen.agent
        held.callback(self._agent_of.pop, task.task_hash, None)
        return chosen

    async def _step(self, task: Task, step: Step) -> None:
        sid = task.session_id
        if isinstance(step, Delta):
            await self.dispatch.emit(task, TextDeltaEvent(session_id=sid, text=step.text))
        elif isinstance(step, ToolCall):
            await self._tool_started(task, step)
        elif isinstance(step, ToolResult):
            await self._tool_finished(task, step)
        elif isinstance(step, Usage):
            # Held until the next step: with the run when that is the end, else just before.
            await self._record_usage(task)
            # Stamped by the gateway's clock: budgets count by the day that clock says.
            at = self.dispatch.courier.clock.now_ms()
            record = step.record(sid, task.task_hash, task.origin.sender_key, at)
            task.hold_usage(self.priced(record))
        elif isinstance(step, Reply):
            await task.set_reply(step.text)
        elif isinstance(step, Switched):
            said = {"from": step.from_model, "to": step.to_model, "reason": step.reason}
            await self.dispatch.log_switch(task, said, step.detail)

    def priced(self, record: UsageRecord) -> UsageRecord:
        """`record` with its cost when a price table is set."""
        if self.prices is None:
            return record
        agent = self._agent_of.get(record.task_hash, self.agent)
        reads_in_input = agent.name not in READS_APART
        return self.prices.priced(record, self.counters, reads_in_input=reads_in_input)

    async def _within_budget(self, task: Task, profile: Mapping[str, int]) -> None:
        """Before a model call: the last call's usage written, then the budgets of whom the
        task acts for, of its shared chat and of its profile, asked."""
        await self._record_usage(task)
        if self.recheck is None:
            return
        try:
            await self.recheck(task.origin.sender_key, task.session_id, profile)
        except QuotaExceeded as exc:
            raise BudgetReached(str(exc)) from None

    # -- tools -----------------------------------------------------------------------------

    async def run_tool(
        self, task: Task, call: ToolCall, execute: Callable[[], Awaitable[str]]
    ) -> ToolResult:
        """Run a tool once per task, journaled around the call.

        On a task replayed after a restart, a call that had finished returns its recorded
        result. One that had started but not finished is run again when it is idempotent (its
        effect is the same however often it runs), and otherwise reported to the agent as
        interrupted: it may or may not have had its effect.
        """
        before = task.journal.replay.tool(call.call_id)
        finished = [s for s in before if isinstance(s, ToolFinished)]
        if finished:
            task.journal.steps.extend(before)
            done = finished[-1]
            task.add_tool_result(done.record())
            return ToolResult(call.call_id, call.tool, done.status, done.result)
        if before and not call.idempotent:
            task.journal.steps.extend(before)
            said = "the gateway restarted while this tool was running"
            result = ToolResult(call.call_id, call.tool, "interrupted", said)
        else:
            await self._tool_started(task, call)
            self.crash.reach("tool_started")
            try:
                result = ToolResult(call.call_id, call.tool, "ok", await execute())
            except asyncio.CancelledError:
                raise
            except BudgetReached as exc:  # a subagent it ran reached a budget: the run ends
                stopped = ToolResult(call.call_id, call.tool, "error", str(exc))
                await self._tool_finished(task, stopped)
                raise
            except Exception as exc:
                result = ToolResult(
                    call.call_id, call.tool, "error", f"{type(exc).__name__}: {exc}"
                )
            self.crash.reach("tool_ran")
        await self._tool_finished(task, result)
        return result

    async def _record_usage(self, task: Task) -> None:
        """Record the usage the task holds, if any (a step other than the end follows)."""
        record = task.take_usage()
        if record is not None:
            await self.store.usage.record(record)

    async def _tool_started(self, task: Task, call: ToolCall) -> None:
        await self._record_usage(task)
        task.journal.steps.append(ToolStarted(call.call_id, call.tool, call.args))
        await task.save_journal()
        await self.dispatch.emit(
            task,
            ToolCallEvent(
                session_id=task.session_id, call_id=call.call_id, tool=call.tool, args=call.args
            ),
        )

    async def _tool_finished(self, task: Task, result: ToolResult) -> None:
        step = ToolFinished(result.call_id, result.tool, result.status, result.result)
        task.add_tool_result(step.record())
        task.journal.steps.append(step)
        await task.save_journal()
        await self.dispatch.emit(
            task,
            ToolResultEvent(
                session_id=task.session_id,
                call_id=result.call_id,
                tool=result.tool,
                status=result.status,
                result=result.result,
            ),
        )

    # -- the end ---------------------------------------------------------------------------

    async def _finish_done(self, task: Task, *, fold_soon: bool) -> None:
        text_event = TextEvent(session_id=task.session_id, text=task.reply)
        done = DoneEvent(session_id=task.session_id, text=task.reply)
        await self._record_end(task, task.reply, [text_event, done])
        self.counters["tasks_done"] += 1
        await task.journal.close(recorded=True)  # before waiters hear of the end
        await task.set_status("done")
        if fold_soon:
            for hook in self.after_task:
                hook(task.session_id)

    async def _finish_error(self, task: Task, message: str) -> None:
        await task.fail(message)
        await self._record_end(task, "", [ErrorEvent(session_id=task.session_id, message=message)])
        self.counters["tasks_failed"] += 1
        await task.journal.close(recorded=True)  # before waiters hear of the end
        await task.set_status("error")

    async def _record_end(self, task: Task, reply: str, events: list[Event]) -> None:
        """`events`' action.log lines in one write; then the reply, the run and the outbox entry
        that carries the first of `events`, in one transaction; then `events` go out in order."""
        pushed = self.dispatch.pushed(task.origin)
        usage = [task.usage] if task.usage is not None else []
        run = RunRecord(
            task.session_id,
            task.task_hash,
            task.text,
            reply,
            task.tool_results,
            usage,
            identity=task.origin.sender_key,
        )
        outbox = [self.dispatch.outbox_entry(task, events[0])] if pushed else []
        # Lines first, in the record's own hand-off: a kill before the record leaves the lines
        # of a reply made again on restart, never a reply sent without its line. The end is
        # recorded once the database is back and the disk has room, however long that takes
        # (finish_run is idempotent per task).
        logged = partial(self.crash.reach, "logged")
        events, lines_first = self.dispatch.line_writer(
            task.session_id, task.task_hash, task.origin, events, then=logged
        )
        sender = self._agent_of.get(task.task_hash, self.agent).name
        items = await until_available(
            lambda: self.store.finish_run(
                run, reply, sender=sender, outbox=outbox, lines_first=lines_first
            ),
            sleep=self.dispatch.courier.clock.sleep,
            what="task ended, not yet recorded",
            until_space=True,
        )
        self.crash.reach("recorded")
        task.mark_recorded()  # the usage held went with the run
        await self.dispatch.show(task, events)
        for n, event in enumerate(events):
            await self.dispatch.deliver(task, event, item=items[0] if items and not n else None)

    async def finish_canceled(self, task: Task) -> None:
        await task.close_prompt()
        await self._record_usage(task)
        await self.dispatch.emit(
            task, CanceledEvent(session_id=task.session_id, by=task.canceled_by)
        )
        self.counters["tasks_canceled"] += 1
        # Before waiters hear of the end. A journal left behind would run the task again at
        # the next start, so its removal waits for an unreachable database.
        await until_available(
            lambda: task.journal.close(recorded=False),
            sleep=self.dispatch.courier.clock.sleep,
            what="task canceled, its journal not yet removed",
            until_space=True,
        )
        await task.set_status("canceled")
