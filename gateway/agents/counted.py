"""A model agent that answers alone (no fallbacks), its calls counted in `ModelStats` as a
chain's targets are: calls and their time, tokens, failed attempts by kind.

It gets no breaker: a breaker only pays where there is another model to go on with, and
skipping the one model there is would turn a provider's brief failure into an error for every
task of the cool-down. Its retries and failures stay as they were: the failures are heard
through its retry policy's `seen` hook, which only listens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Final

from gateway.agents.base import Agent, AgentContext, Step, Usage, closing
from gateway.agents.model_stats import ModelStats, TargetLabel
from gateway.agents.retries import ALONE, RetryPolicy

# The agents whose calls go to a provider's API, as `TargetLabel`s name their targets; the
# offline agent calls nothing, and the claude-code CLI's calls are its own.
MODEL_AGENTS: Final = frozenset({"openai", "claude"})


def alone_policy(kind: str, stats: ModelStats, label: TargetLabel) -> RetryPolicy:
    """How a lone agent of `kind` retries: as ever (`ALONE`), its failed attempts counted."""
    if kind not in MODEL_AGENTS:
        return ALONE  # nothing to count, and no target row of zeros in /metrics
    return dataclasses.replace(ALONE, seen=stats.seen(label))


class Counted:
    """`agent`, its answered calls (its `Usage` steps) counted under `label`."""

    def __init__(self, agent: Agent, label: TargetLabel, stats: ModelStats) -> None:
        self.agent = agent
        self.label = label
        self.stats = stats
        self.name = agent.name  # the reply's sender, and what pricing reads
        self.reads_recall = agent.reads_recall
        self.tool_names = agent.tool_names
        self.tool_prefixes = agent.tool_prefixes
        stats.target(label)  # shown (at zero) from the start, as a chain's targets are

    async def run(self, ctx: AgentContext) -> AsyncIterator[Step]:
        async with closing(self.agent.run(ctx)) as steps:
            async for step in steps:
                if isinstance(step, Usage):
                    self.stats.usage(self.label, step)
                yield step

    async def aclose(self) -> None:
        await self.agent.aclose()
