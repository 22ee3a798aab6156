"""A chain of agents for one task: the primary model, then its fallbacks.

Each model first retries a failing call a little on its own (`retries.IN_CHAIN`: one more try,
waiting out a short Retry-After); when its provider still fails — rate limited, quota spent,
server error, overloaded, timed out, unreachable, raised as `ProviderFailed` — the task goes on
with the next model, after a short backoff. Any other failure (a refused request, a rejected
key) ends the task as before: another model would not fix it.

- **Breakers**: each target has a `CircuitBreaker`; an open one is skipped, a half-open one
  gets one trial task. When every target is open the task fails at once, saying when each
  one is tried again.
- **One reply from one model**: what the failed model streamed stays shown (it cannot be
  taken back from a chat), so when it had shown text the next model's text is preceded by a
  line `— switched to <model>: <reason> —`; the final reply is the answering model's alone.
- **Tools run once**: a call the earlier model ran is answered from its result, not run (nor
  confirmed) again, and the next model is told what ran (`fallback_context`).
- **Audit**: each switch is a `Switched` step (an action.log line) and is counted per model
  in `ModelStats`; usage rows name the model of each call, whichever answered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Final

from gateway.agents.base import (
    Agent,
    AgentContext,
    AgentFailed,
    Delta,
    Step,
    Switched,
    Usage,
    closing,
)
from gateway.agents.breaker import CircuitBreaker
from gateway.agents.fallback_context import MemberContext, ToolsRan
from gateway.agents.model_stats import ModelStats, TargetLabel
from gateway.agents.retries import ProviderFailed
from gateway.agents.summary import Summarizes
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.logs import get_logger
from gateway.store.sessions import StoredMessage

log = get_logger(__name__)

FIRST_SWITCH_WAIT: Final = 0.5  # seconds before the first switch; doubled for each next one
LONGEST_SWITCH_WAIT: Final = 8.0
REASONS: Final = {
    "rate_limited": "rate limited",
    "quota": "quota exceeded",
    "server_error": "server error",
    "overloaded": "overloaded",
    "timeout": "timed out",
    "unreachable": "unreachable",
}


def switch_marker(model: str, reason: str) -> str:
    """The line between a failed model's text and the next model's."""
    return f"\n\n— switched to {model}: {REASONS.get(reason, reason)} —\n\n"


@dataclass
class Member:
    """One model target of a chain."""

    agent: Agent
    label: TargetLabel
    breaker: CircuitBreaker


class FallbackChain:
    """An `Agent` that runs its members in order until one answers."""

    def __init__(self, members: Sequence[Member], clock: Clock, stats: ModelStats) -> None:
        if not members:
            raise ValueError("a fallback chain needs at least one agent")
        self.members = list(members)
        self.clock = clock
        self.stats = stats
        primary = self.members[0].agent
        self.name = primary.name  # the reply's sender in the archive, as without fallbacks
        self.reads_recall = any(m.agent.reads_recall for m in self.members)
        self.tool_names = frozenset().union(*(m.agent.tool_names for m in self.members))
        self.tool_prefixes = tuple(
            dict.fromkeys(p for m in self.members for p in m.agent.tool_prefixes)
        )
        for member in self.members:
            stats.target(member.label, member.breaker)

    async def aclose(self) -> None:
        for member in self.members:
            await member.agent.aclose()

    async def summarize(self, previous: str, messages: Sequence[StoredMessage]) -> str:
        """Rolling summaries through the members that make them, past failed providers."""
        failures: list[str] = []
        for member in self.members:
            agent = member.agent
            if not isinstance(agent, Summarizes) or not member.breaker.admit():
                continue
            try:
                summary = await agent.summarize(previous, messages)
            except ProviderFailed as exc:
                member.breaker.failed(exc.retry_after)
                failures.append(f"{member.label}: {exc}")
                continue
            except BaseException:
                member.breaker.released()
                raise
            member.breaker.succeeded()
            return summary
        raise AgentFailed("no model could summarize: " + "; ".join(failures or ["all skipped"]))

    async def run(self, ctx: AgentContext) -> AsyncIterator[Step]:
        ran = ToolsRan()
        shown = False  # some member streamed reply text already
        failed: tuple[Member, ProviderFailed] | None = None
        why_not: list[str] = []
        for index, member in enumerate(self.members):
            if not member.breaker.admit():
                left = member.breaker.seconds_left()
                why_not.append(f"{member.label}: skipped, tried again in {left:.0f} s")
                continue
            if failed is not None:
                before, failure = failed
                await self.clock.sleep(self._switch_wait(len(why_not)))
                self.stats.switched(before.label, member.label, failure.kind)
                log.warning(
                    "model switched",
                    session=ctx.session_id,
                    task=ctx.task_hash,
                    model=before.label.model,
                    to=member.label.model,
                    reason=failure.kind,
                )
                model = member.label.model
                yield Switched(before.label.model, model, failure.kind, str(failure))
                if shown:
                    yield Delta(switch_marker(model, failure.kind))
            context = MemberContext(ctx, ran, takes_over=index > 0)
            verdict = False
            try:
                async with closing(member.agent.run(context)) as steps:
                    async for step in steps:
                        if isinstance(step, Delta):
                            shown = True
                        elif isinstance(step, Usage):
                            self.stats.usage(member.label, step)
                        yield step
                member.breaker.succeeded()
                verdict = True
                return
            except ProviderFailed as exc:
                member.breaker.failed(exc.retry_after)
                verdict = True
                failed = (member, exc)
                why_not.append(f"{member.label}: {exc}")
            finally:
                if not verdict:
                    member.breaker.released()  # canceled, or refused for another reason
        raise AgentFailed("no model could answer: " + "; ".join(why_not))

    def _switch_wait(self, switches_before: int) -> float:
        wait: float = FIRST_SWITCH_WAIT * 2.0 ** max(0, switches_before - 1)
        return min(wait, LONGEST_SWITCH_WAIT)


def build_chain(
    primary: Agent,
    fallbacks: Sequence[Agent],
    *,
    labels: Sequence[TargetLabel] | None = None,
    clock: Clock = SYSTEM_CLOCK,
    stats: ModelStats | None = None,
    breaker_failures: int = 3,
    breaker_cooldown: float = 60.0,
) -> FallbackChain:
    """The agent that answers with `primary`, then each of `fallbacks` in order.

    `labels` name each agent's target (`chains.label_of(settings)`; default: the agent's
    name); a target's breaker lives in `stats`, so chains sharing `stats` share it. Each agent
    should retry on its own only briefly (built with `retries.IN_CHAIN`, its `seen` hook from
    `stats.seen(label)`), or its own tries delay the switch."""
    agents = [primary, *fallbacks]
    names = list(labels) if labels is not None else [TargetLabel(a.name, a.name) for a in agents]
    if len(names) != len(agents):
        raise ValueError("build_chain: one label per agent")
    stats = stats or ModelStats()
    members = [
        Member(agent, label, stats.breaker(label, clock, breaker_failures, breaker_cooldown))
        for agent, label in zip(agents, names, strict=True)
    ]
    return FallbackChain(members, clock, stats)
