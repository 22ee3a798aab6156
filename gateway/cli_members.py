"""`agenvoy export-me`, `agenvoy export IDENTITY` and `agenvoy forget IDENTITY`: a member's
data from the archive itself, for the local user and for the operator.

They open the store directly, like the other archive readers, and are safe beside a running
gateway: rows change in transactions, files under the locks their writers take. A member with
a task not finished is refused here (only the gateway that runs it can cancel it): the API's
`POST /v1/me/forget` or `/forget_me` cancels it first.
"""

from __future__ import annotations

import asyncio
import getpass
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from gateway.cli_support import fail, load_settings


def _run(identity: str, *, forget: bool, by: str = "") -> Any:
    from gateway.agents.tool_memory import ToolMemory
    from gateway.clock import SYSTEM_CLOCK
    from gateway.member_data.service import MemberData, NotAMember, OpenTasks
    from gateway.store.db import DatabaseError
    from gateway.store.kv import open_kv
    from gateway.store.sessions import SessionStore

    settings = load_settings()

    async def main() -> Any:
        store = await SessionStore.open(settings)
        try:
            if not forget:
                return await MemberData(store).export(identity)
            # The tool cache and error memory may quote them too: the gateway's KV store,
            # shared with a running gateway like the archive.
            async with await open_kv(settings.resolved_kv_url) as kv:
                memory = ToolMemory.open(kv, settings, SYSTEM_CLOCK)
                return await MemberData(store, tool_memory=memory).forget(identity, by=by)
        finally:
            await store.close()

    try:
        return asyncio.run(main())
    except (NotAMember, OpenTasks) as exc:
        fail(str(exc), 2 if isinstance(exc, NotAMember) else 1)
    except DatabaseError as exc:
        fail(f"database: {exc}", 1)


def _write(document: Any, output: Path | None) -> None:
    text = json.dumps(document, ensure_ascii=False, indent=2)
    if output is None:
        typer.echo(text)
        return
    output.write_text(text + "\n", encoding="utf-8")
    output.chmod(0o600)
    typer.echo(f"written to {output}")


Output = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write the JSON here instead of stdout.")
]


def export_me(output: Output = None) -> None:
    """Everything stored about you (the local user, terminal:USER, and linked identities)."""
    _write(_run(f"terminal:{getpass.getuser()}", forget=False), output)


def export(
    identity: Annotated[str, typer.Argument(help="platform:sender id, e.g. telegram:42")],
    output: Output = None,
) -> None:
    """Everything stored about a member (and identities linked with theirs), as JSON."""
    _write(_run(identity, forget=False), output)


def forget(
    identity: Annotated[str, typer.Argument(help="platform:sender id, e.g. http:bob")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Erase what a member wrote, and the replies to it, everywhere; leaves an audit line."""
    if not yes and not typer.confirm(f"Erase everything {identity} wrote? It cannot be undone"):
        fail("nothing erased", 1)
    done = _run(identity, forget=True, by=f"terminal:{getpass.getuser()}")
    shown = ", ".join(f"{k} {v}" for k, v in done.counts().items())
    typer.echo(f"erased {identity}: {shown}")


def register(app: typer.Typer) -> None:
    app.command("export-me")(export_me)
    app.command()(export)
    app.command()(forget)
