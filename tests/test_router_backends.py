"""The router on each archive backend (SQLite and PostgreSQL), through a whole runtime."""

from __future__ import annotations

from pathlib import Path

from test_router import finished, inbound

from gateway.runtime import Runtime
from gateway.settings import Settings


async def test_a_nul_is_stored_as_a_replacement_on_every_backend(
    tmp_path: Path, database_url: str
) -> None:
    """PostgreSQL text cannot hold NUL: the task must still end, with its reply archived."""
    settings = Settings(home=tmp_path / "h", database_url=database_url, _env_file=None)
    rt = await Runtime.start(settings)
    try:
        sub = await rt.router.submit(inbound("cli-nul", "a\x00b"))
        assert await finished(rt.router, sub.task_hash) == "echo: a\x00b"
        archived = await rt.store.recent_messages("cli-nul")
        assert [m.content for m in archived] == ["a\ufffdb", "echo: a\ufffdb"]
        (run,) = [await rt.store.finished_run("cli-nul", sub.task_hash)]
        assert run is not None and run["objective"] == "a\ufffdb"
        await rt.router.submit(inbound("cli-nul", "/persona calm\x00er"))
        assert (await rt.store.require("cli-nul")).persona == "calm\ufffder"
    finally:
        await rt.close()
