"""How an agent runs a tool: `Tool` (a JSON schema, a confirmation flag, a run function),
and `call_tool`, the one way every agent runs one: checked against its schema, told of an
earlier failure of the same call, confirmed where the tool says so, then through the router
(journaled, run once), from the tool cache when it holds the result. The built-in tools are
in `gateway.agents.tools`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.agents.base import AgentContext, ToolCall, ToolResult
from gateway.agents.error_memory import RepeatedFailure
from gateway.agents.tool_args import InvalidArguments, check_args
from gateway.agents.tool_cache import Reads, canonical_args
from gateway.agents.tool_memory import ToolMemory

# The id of the tool call being run, for a tool that names what it starts after it (delegate).
CURRENT_CALL: ContextVar[str] = ContextVar("agenvoy_current_tool_call", default="")


class ToolFailed(Exception):
    """A tool could not do what was asked; the message goes back to the model."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    needs_confirmation: bool
    run: Callable[[AgentContext, dict[str, Any]], Awaitable[str]]
    # The same call run twice has the effect of running it once (see ToolCall.idempotent).
    idempotent: bool = True
    # What the result depends on: its version keys the tool cache and dates a failure.
    reads: Reads = Reads.nothing
    # Only reads, so its result may come from the tool cache.
    cached: bool = False
    # Writes or deletes workspace files: cached reads of the workspace are stale after it.
    changes_workspace: bool = False

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolSource(Protocol):
    """Tools found while the gateway runs, next to the built-in ones (the MCP servers')."""

    # What their names start with: `/allow` takes such a name before the tools are known.
    prefixes: tuple[str, ...]

    async def tools(self) -> Mapping[str, Tool]: ...

    async def aclose(self) -> None: ...


async def with_found(builtin: Mapping[str, Tool], source: ToolSource | None) -> dict[str, Tool]:
    """The built-in tools and, after them, those of `source`; a built-in name wins."""
    if source is None:
        return dict(builtin)
    found = await source.tools()
    return {**builtin, **{name: tool for name, tool in found.items() if name not in builtin}}


async def call_tool(
    ctx: AgentContext, tools: Mapping[str, Tool], call_id: str, name: str, args: dict[str, Any]
) -> ToolResult:
    """Run one call a model asked for: checked against the tool's schema, told of an earlier
    failure of the same call, confirmed where the tool says so, then through the router
    (journaled, run once), from the tool cache when it holds the result. Every agent with
    tools goes through here, so none of it can differ between providers."""
    tool = tools.get(name)
    if tool is None:
        return ToolResult(call_id, name, "error", f"there is no tool named {name!r}")
    call = ToolCall(call_id, name, args, idempotent=tool.idempotent)
    try:
        check_args(name, tool.parameters, args)
    except InvalidArguments as exc:
        # Through the router like any result, so the audit trail shows the call it refused.
        invalid = str(exc)

        async def refuse_invalid() -> str:
            raise InvalidArguments(invalid)

        return await ctx.run_tool(call, refuse_invalid)
    memory = ctx.tool_memory
    key = canonical_args(args, tool.reads)
    failed_before = False
    if memory is not None and memory.errors.enabled:
        failure = await memory.errors.recall(ctx.session_id, name, key)
        failed_before = failure is not None
        if failure is not None:
            version = await _version(ctx, memory, tool, args)
            this_call = f"{ctx.task_hash}/{call_id}"
            if memory.errors.refuses(failure, version, this_call):
                await memory.errors.refused(ctx.session_id, name, key, failure, this_call)
                told = memory.errors.refusal(failure)

                async def refuse() -> str:
                    raise RepeatedFailure(told)

                return await ctx.run_tool(call, refuse)
    if tool.needs_confirmation and not await ctx.confirm(name, args):
        return ToolResult(call_id, name, "denied", "the user denied this action")

    async def execute() -> str:
        CURRENT_CALL.set(call_id)  # this task's own context: no other call sees it
        if memory is None:
            return await _run(ctx, tool, args)
        return await _run_remembered(ctx, memory, tool, args, key, failed_before=failed_before)

    return await ctx.run_tool(call, execute)


async def _run(ctx: AgentContext, tool: Tool, args: dict[str, Any]) -> str:
    try:
        return await tool.run(ctx, args)
    except ToolFailed as exc:
        raise RuntimeError(str(exc)) from exc


async def _run_remembered(
    ctx: AgentContext,
    memory: ToolMemory,
    tool: Tool,
    args: dict[str, Any],
    key: str,
    *,
    failed_before: bool,
) -> str:
    """`_run`, served from the tool cache or filling it; a failure remembered, a success
    forgetting an earlier one."""
    sid, cache, errors = ctx.session_id, memory.cache, memory.errors
    version = None
    if tool.cached and cache.enabled:
        version = await _version(ctx, memory, tool, args)
        if version is not None:
            hit = await cache.get(sid, tool.name, key, version)
            if hit is not None:
                return hit
    try:
        result = await _run(ctx, tool, args)
    except Exception as exc:
        if tool.changes_workspace:
            await cache.workspace_changed(sid)  # it may have got halfway
        if errors.enabled:
            # Dated after the failure: a repeat finds the same version unless something moved.
            after = await _version(ctx, memory, tool, args)
            await errors.remember(sid, tool.name, key, f"{type(exc).__name__}: {exc}", after)
        raise
    if tool.changes_workspace:
        await cache.workspace_changed(sid)
    if failed_before:
        await errors.forget(sid, tool.name, key)
    if version is not None:
        await cache.put(sid, tool.name, key, version, result)
    return result


async def _version(
    ctx: AgentContext, memory: ToolMemory, tool: Tool, args: dict[str, Any]
) -> str | None:
    return await memory.cache.version(
        ctx.session_id, tool.reads, ctx.workspace, args, ctx.latest_message_id
    )


def result_text(result: ToolResult) -> str:
    """What the model reads of a tool's result."""
    return result.result if result.status == "ok" else f"error ({result.status}): {result.result}"
