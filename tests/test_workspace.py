"""Workspace files against a hostile workspace: links planted anywhere are never followed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gateway.agents.workspace import Workspace, WorkspaceError


@pytest.fixture
def session_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "sessions" / "cli-a"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("the secret")
    return folder


@pytest.fixture
def ws(session_dir: Path) -> Workspace:
    return Workspace(session_dir / "workspace")


def refused(call: object, *args: object) -> str:
    """The message of the WorkspaceError `call(*args)` raises."""
    assert callable(call)
    with pytest.raises(WorkspaceError) as info:
        call(*args)
    return str(info.value)


def test_plain_files_round_trip(ws: Workspace, session_dir: Path) -> None:
    assert ws.list() == [] and ws.read("a.txt") is None
    ws.write("a.txt", b"one")
    ws.write("notes/deep/b.txt", b"two")
    ws.write("a.txt", b"three")
    assert ws.read("a.txt") == b"three"
    assert ws.read("notes/deep/b.txt", limit=2) == b"tw"
    assert ws.list() == ["a.txt", "notes/deep/b.txt"]
    assert sorted(os.listdir(session_dir / "workspace")) == ["a.txt", "notes"]  # no temp left
    ws.delete("a.txt")
    assert ws.read("a.txt") is None
    assert "does not exist" in refused(ws.delete, "a.txt")


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/../../x", "", ".", "a\x00b"])
def test_names_that_could_leave_are_refused(ws: Workspace, name: str) -> None:
    refused(ws.write, name, b"x")
    refused(ws.read, name)


def test_a_linked_workspace_folder_is_never_entered(
    ws: Workspace, session_dir: Path, outside: Path
) -> None:
    (session_dir / "workspace").symlink_to(outside, target_is_directory=True)
    assert "the workspace folder is not a folder" in refused(ws.write, "new.txt", b"x")
    assert "not a folder" in refused(ws.read, "secret.txt")
    refused(ws.delete, "secret.txt")
    refused(ws.list)
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "the secret"


def test_a_linked_folder_inside_is_never_entered(
    ws: Workspace, session_dir: Path, outside: Path
) -> None:
    ws.write("keep.txt", b"k")
    (session_dir / "workspace" / "sub").symlink_to(outside, target_is_directory=True)
    message = refused(ws.write, "sub/new.txt", b"x")
    assert message.startswith("'sub' is not a folder")
    refused(ws.read, "sub/secret.txt")
    refused(ws.delete, "sub/secret.txt")
    assert ws.list() == ["keep.txt"]  # neither listed nor descended into
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_a_linked_file_is_neither_read_nor_deleted(
    ws: Workspace, session_dir: Path, outside: Path
) -> None:
    ws.write("real.txt", b"r")
    (session_dir / "workspace" / "link.txt").symlink_to(outside / "secret.txt")
    (session_dir / "workspace" / "inner.txt").symlink_to("real.txt")
    assert "is a link" in refused(ws.read, "link.txt")
    assert "is a link" in refused(ws.delete, "link.txt")
    assert ws.list() == ["real.txt"]
    # Writing replaces the link itself; what it pointed to is untouched.
    ws.write("link.txt", b"mine")
    assert (outside / "secret.txt").read_text() == "the secret"
    assert not (session_dir / "workspace" / "link.txt").is_symlink()
    assert ws.read("link.txt") == b"mine"


def test_links_planted_at_every_temporary_name_are_not_written_through(
    ws: Workspace, session_dir: Path, outside: Path
) -> None:
    folder = session_dir / "workspace"
    folder.mkdir()
    for planted in [".notes.txt.tmp", ".notes.txt.part", "notes.txt.tmp"]:
        (folder / planted).symlink_to(outside / "secret.txt")
    ws.write("notes.txt", b"hello")
    assert ws.read("notes.txt") == b"hello"
    assert (outside / "secret.txt").read_text() == "the secret"
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_a_fifo_or_a_hard_link_is_not_read(ws: Workspace, session_dir: Path, outside: Path) -> None:
    ws.write("x.txt", b"x")
    folder = session_dir / "workspace"
    os.mkfifo(folder / "pipe")
    os.link(outside / "secret.txt", folder / "hard.txt")
    assert "not a regular file" in refused(ws.read, "pipe")  # and it did not wait for a writer
    assert "hard links" in refused(ws.read, "hard.txt")
    assert ws.list() == ["x.txt"]


def test_errors_never_show_the_server_path(
    ws: Workspace, session_dir: Path, outside: Path, tmp_path: Path
) -> None:
    (session_dir / "workspace").mkdir()
    (session_dir / "workspace" / "dir").mkdir()
    (session_dir / "workspace" / "link").symlink_to(outside / "secret.txt")
    messages = [
        refused(ws.write, "dir", b"x"),
        refused(ws.read, "dir"),
        refused(ws.read, "link"),
        refused(ws.write, "link/x", b"x"),
        refused(ws.write, "x" * 300, b"x"),
    ]
    assert all(str(tmp_path) not in m and "outside" not in m for m in messages), messages
    assert messages[0].startswith("'dir' cannot be used")


async def test_attachments_are_not_written_through_a_planted_link(
    tmp_path: Path, outside: Path
) -> None:
    from adapters.attachments import Download, stage_downloads
    from gateway.settings import Settings
    from gateway.store.sessions import SessionStore

    store = await SessionStore.open(Settings(home=tmp_path / "home", _env_file=None))
    try:
        await store.ensure("tg-7")
        workspace = store.files("tg-7").dir / "workspace"
        workspace.mkdir()
        (workspace / "attachments").symlink_to(outside)  # planted by an agent's shell tool

        async def fetch() -> bytes:
            return b"photo bytes"

        staged = await stage_downloads(
            store, "tg-7", [Download("p1_photo.jpg", "image/jpeg", 11, fetch)], 1000, ()
        )
        await staged.keep()
        landed = sorted(p.name for p in await asyncio.to_thread(lambda: list(outside.iterdir())))
        assert landed == ["secret.txt"]  # nothing new landed outside the session
    finally:
        await store.close()
