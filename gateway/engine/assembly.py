"""The engine, built in one place from what the composition root hands in.

Every part receives what it acts through when it is constructed; nothing is set on a part
afterwards. One loop remains and is closed here, in plain sight: the scheduler asks the owner
(before a session's next task, once it is idle) and the queue modes (gathering a queue), and
those act on the scheduler. The scheduler's hooks are closures over names bound a few lines
below them, so the loop is one function's business, not the router's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.agents.base import Agent
from gateway.agents.tool_memory import ToolMemory
from gateway.auth import Authority
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.crash import NO_CRASH, CrashPoints
from gateway.engine.cancels import Cancels
from gateway.engine.cluster import Cluster, OwnerParts, RelayParts
from gateway.engine.dispatch import Dispatch
from gateway.engine.intake import CommandRunner, Intake, IsCommand, Screen
from gateway.engine.outbox import Courier
from gateway.engine.prompts import Prompts
from gateway.engine.queue_modes import QueueModes
from gateway.engine.router import COUNTERS, Router
from gateway.engine.runner import Runner
from gateway.engine.scheduler import Scheduler
from gateway.engine.takeover import Takeover
from gateway.engine.task import Task
from gateway.engine.tasks import TaskTable
from gateway.engine.traffic import Traffic
from gateway.knowledge.service import Knowledge
from gateway.memory.recall import Recall
from gateway.presence import Presence
from gateway.prices import PriceTable
from gateway.profiles.agents import AgentPool
from gateway.quotas import Admission
from gateway.settings import Settings
from gateway.store.sessions import SessionStore


@dataclass(frozen=True, slots=True)
class Engine:
    """The engine as built: the router is its face for every front-end; the courier
    redelivers what a previous run left in the outbox; the runner carries each task."""

    router: Router
    courier: Courier
    runner: Runner
    admission: Admission  # quotas and budgets, asked before a message becomes a task


def assemble(
    settings: Settings,
    store: SessionStore,
    agent: Agent,
    presence: Presence,
    cluster: Cluster,
    *,
    authority: Authority | None = None,
    clock: Clock = SYSTEM_CLOCK,
    crash: CrashPoints = NO_CRASH,
    tool_memory: ToolMemory | None = None,
    commands: CommandRunner | None = None,
    is_command: IsCommand | None = None,
    screen: Screen | None = None,
    recall: Recall | None = None,
    knowledge: Knowledge | None = None,
    after_task: Sequence[Callable[[str], None]] = (),
    prices: PriceTable | None = None,
    agents: AgentPool | None = None,
) -> Engine:
    """`cluster`: alone or one of several instances (`gateway.cluster`); `commands`: gateway
    commands, answered before the agent sees a text (`is_command` tells one by its text);
    `screen`: turns a message away before anything of it is kept (a ban); `recall`: older
    messages recalled into each task's context, `knowledge`: the attached documents' passages found
    for it; `after_task`: called with the session id
    after each task that finished with a reply (the rolling summary); `agents`: the agent of
    each task's profile (None: `agent` answers every task)."""
    authority = authority or Authority(settings.admin_keys)
    counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
    traffic = Traffic()  # messages in and out per platform, for /metrics
    tasks = TaskTable(store)

    async def run(task: Task) -> None:
        await runner.run(task)
        if task.finished:
            tasks.ended(task)

    async def canceled_before_start(task: Task) -> None:
        await runner.finish_canceled(task)
        tasks.ended(task)

    dispatch = Dispatch(
        store,
        counters,
        clock,
        claimant=cluster.claimant,
        claim_seconds=cluster.claim_seconds,
        outbox_expiry_seconds=settings.outbox_expiry_seconds,
        published=lambda task, event: elsewhere.publish(task, event),
        traffic=traffic,
    )
    scheduler: Scheduler[Task] = Scheduler(
        settings.max_concurrent_tasks,
        run,
        canceled_before_start,
        per_sender=settings.max_running_per_sender,
        before_next=lambda session_id: ownership.refresh(session_id),
        on_idle=lambda session_id: ownership.idle(session_id),
        gather=lambda session_id, queue: queue_modes.gather(session_id, queue),
        counts_as=lambda sender: admission.people.key(sender),
        slots_for=lambda key: admission.people.running(key),
    )
    admission = Admission(settings, store, authority.admins, clock, scheduler.tasks_of)
    prompts = Prompts(
        dispatch,
        scheduler,
        authority,
        clock,
        settings.confirm_timeout_seconds,
        crash,
        answers=cluster.answers(store),
    )

    async def cancel_here(session_id: str, task_hash: str, by: str) -> bool:
        return await cancels.cancel(session_id, task_hash, by=by)

    elsewhere = cluster.elsewhere(
        RelayParts(
            tasks=tasks,
            dispatch=dispatch,
            prompts=prompts,
            store=store,
            authority=authority,
            cancel_here=cancel_here,
        )
    )
    cancels = Cancels(tasks, scheduler, elsewhere, authority)
    takeover = Takeover(
        store, tasks, scheduler, elsewhere, dispatch.restore_user_lines, here=cluster.claimant
    )
    ownership = cluster.owner(
        OwnerParts(
            store,
            take_up=takeover.take_up,
            interrupt=takeover.interrupt,
            is_busy=scheduler.is_busy,
            is_live=takeover.is_live,
        )
    )
    queue_modes = QueueModes(store, scheduler, dispatch, tasks, crash)
    runner = Runner(
        store,
        agent,
        presence,
        dispatch,
        prompts,
        counters,
        settings.history_window,
        crash,
        tool_memory,
        steer=queue_modes.steer,
        max_subagent_depth=settings.max_subagent_depth,
        max_subagents_per_task=settings.max_subagents_per_task,
        after_task=after_task,
        recall=recall,
        knowledge=knowledge,
        recheck=admission.recheck,
        prices=prices,
        agents=agents,
    )
    intake = Intake(
        store,
        tasks,
        dispatch,
        scheduler,
        clock,
        settings.max_message_chars,
        ownership,
        elsewhere,
        crash,
        accepting=takeover.accepting,
        queue_modes=queue_modes,
        max_queued_per_session=settings.max_queued_per_session,
        commands=commands,
        is_command=is_command,
        screen=screen,
        admit=admission.admit,
        traffic=traffic,
        received_by=cluster.claimant or "",
    )
    router = Router(
        store=store,
        clock=clock,
        counters=counters,
        traffic=traffic,
        tasks=tasks,
        dispatch=dispatch,
        scheduler=scheduler,
        intake=intake,
        prompts=prompts,
        cancels=cancels,
        takeover=takeover,
        ownership=ownership,
        elsewhere=elsewhere,
    )
    return Engine(router, dispatch.courier, runner, admission)
