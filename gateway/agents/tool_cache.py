"""The tool cache: the result of a read-only tool call, reused while nothing it read changed.

An entry is found under `toolcache:<sid>:<tool>:<digest>`, the digest taken over the call's
arguments as canonical JSON and the *version of what the call reads*:

- the session's workspace generation, a random token replaced after every write or delete
  the gateway's tools do (a token, not a counter: nobody has to read it to replace it, and a
  lost token is replaced by a new one, never by an old value that could revive old entries);
- for `list_files`, the identity and modification time of every folder of the workspace, and
  for `read_file`, the identity, size, modification and change time of the file and of each
  folder on the way to it: files
  changed by other means — an attachment saved there, an agent's own shell, or a session that
  moved to an instance with a workspace of its own — miss as well. The change time cannot be
  set back by hand, and a write replaces the file (a new inode), so a lookup does not depend
  on the filesystem's clock resolution for the gateway's own writes;
- for `search_history`, the id of the session's newest archived message (every message, from
  whoever, moves it).

An entry holds the result exactly as the tool returned it and the time it was stored; it is
served for `ttl` seconds of the runtime's clock (the KV store's own expiry only frees the
space). Failures are never stored. The cache is an optimisation: when the KV store fails, the
call runs as if nothing were cached.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import stat
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from gateway.agents.workspace import MAX_LIST_DEPTH, WorkspaceError, file_parts
from gateway.clock import Clock
from gateway.logs import get_logger
from gateway.store.kv import TOOL_CACHE_PREFIX, KVStore

log = get_logger(__name__)

# Larger results are not kept: the reaper and /forget read a session's entries back.
MAX_CACHED_CHARS: Final = 512 * 1024
# The generation outlives any entry made under it; if it still lapses, a new one is drawn and
# the entries made under the old one are simply never found again.
GENERATION_TTL_SECONDS: Final = 7 * 24 * 3600.0
# A workspace with more folders than this is not fingerprinted (its calls are not cached):
# the fingerprint must stay cheaper than the listing it stands for.
MAX_FINGERPRINT_FOLDERS: Final = 2000


class Reads(StrEnum):
    """What a tool's result depends on."""

    nothing = "nothing"
    workspace = "workspace"  # the names of the workspace's files
    file = "file"  # the workspace file named by the `name` argument
    history = "history"  # the session's archive


def canonical_args(args: dict[str, Any], reads: Reads = Reads.nothing) -> str:
    """The arguments as one string, equal for calls that mean the same: keys sorted, no
    spacing, and a file name as the workspace resolves it (`./a//b` is `a/b`)."""
    normal = dict(args)
    if reads is Reads.file:
        # A name the workspace refuses is kept as given: the call fails on it anyway.
        with contextlib.suppress(WorkspaceError):
            normal["name"] = "/".join(file_parts(args.get("name")))
    return json.dumps(normal, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(*parts: str) -> str:
    hashed = hashlib.sha256()
    for part in parts:
        hashed.update(part.encode("utf-8", errors="surrogatepass"))
        hashed.update(b"\x00")
    return hashed.hexdigest()[:32]


class ToolCache:
    def __init__(self, kv: KVStore, ttl_seconds: float, clock: Clock) -> None:
        self.kv = kv
        self.ttl = ttl_seconds
        self.clock = clock
        # (tool, "hit" | "miss") → lookups; read by the metrics.
        self.lookups: Counter[tuple[str, str]] = Counter()

    @property
    def enabled(self) -> bool:
        return self.ttl > 0

    async def version(
        self,
        session_id: str,
        reads: Reads,
        workspace: Path,
        args: dict[str, Any],
        latest_message_id: Callable[[], Awaitable[int]],
    ) -> str | None:
        """The version of what a call reads; None when it cannot be told (not cached then)."""
        if reads is Reads.nothing:
            return ""
        if reads is Reads.history:
            return f"history:{await latest_message_id()}"
        generation = await self.generation(session_id)
        if generation is None:
            return None
        if reads is Reads.workspace:
            seen = await asyncio.to_thread(_folders_fingerprint, workspace)
        else:
            seen = await asyncio.to_thread(_file_fingerprint, workspace, args.get("name"))
        return None if seen is None else f"{generation}:{seen}"

    async def get(self, session_id: str, tool: str, args: str, version: str) -> str | None:
        """The stored result of the same call on the same version, within the TTL."""
        found: str | None = None
        try:
            raw = await self.kv.get(_key(session_id, tool, args, version))
            if raw is not None:
                entry = json.loads(raw)
                if self.clock.now_ms() - int(entry["at"]) < self.ttl * 1000:
                    found = str(entry["result"])
        except Exception:
            log.warning("tool cache unreadable", session=session_id, tool=tool, exc_info=True)
        self.lookups[(tool, "miss" if found is None else "hit")] += 1
        return found

    async def put(self, session_id: str, tool: str, args: str, version: str, result: str) -> None:
        if len(result) > MAX_CACHED_CHARS:
            return
        entry = json.dumps({"at": self.clock.now_ms(), "result": result}, ensure_ascii=False)
        try:
            await self.kv.set(_key(session_id, tool, args, version), entry, ttl=self.ttl)
        except Exception:
            log.warning("tool cache not written", session=session_id, tool=tool, exc_info=True)

    async def generation(self, session_id: str) -> str | None:
        """The workspace's current generation, drawn anew when there is none."""
        key = _generation_key(session_id)
        try:
            current = await self.kv.get(key)
            if current is None:
                current = secrets.token_hex(8)
                await self.kv.set(key, current, ttl=GENERATION_TTL_SECONDS)
        except Exception:
            log.warning("tool cache unreadable", session=session_id, exc_info=True)
            return None
        return current

    async def workspace_changed(self, session_id: str) -> None:
        """After a write or delete by the gateway's tools: every workspace entry misses."""
        try:
            await self.kv.set(
                _generation_key(session_id), secrets.token_hex(8), ttl=GENERATION_TTL_SECONDS
            )
        except Exception:
            # Still safe: the file's fingerprint changed with the write.
            log.warning("tool cache generation not replaced", session=session_id, exc_info=True)

    async def clear(self, session_id: str) -> int:
        """Drop every entry of the session (and its generation); how many went."""
        removed = 0
        for key in await self.kv.scan(f"{TOOL_CACHE_PREFIX}{session_id}:"):
            removed += await self.kv.delete(key)
        return removed


def _key(session_id: str, tool: str, args: str, version: str) -> str:
    return f"{TOOL_CACHE_PREFIX}{session_id}:{tool}:{digest(args, version)}"


def _generation_key(session_id: str) -> str:
    # `@` is in no tool name, so the generation never shares a key with an entry.
    return f"{TOOL_CACHE_PREFIX}{session_id}:@generation"


def _identity(info: os.stat_result) -> str:
    return f"{info.st_ino}.{info.st_size}.{info.st_mtime_ns}.{info.st_ctime_ns}"


def _file_fingerprint(workspace: Path, name: object) -> str | None:
    """The named file, and each folder on the way to it, as the filesystem has them now: a
    folder swapped for a link to the same place changes it too (the tool refuses links)."""
    try:
        parts = file_parts(name)
    except WorkspaceError:
        return "invalid"
    seen = []
    path = workspace
    for part in ("", *parts):
        path = path / part if part else path
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            seen.append("-")
            break
        except OSError as exc:
            seen.append(f"error:{exc.errno}")
            break
        kind = "d" if stat.S_ISDIR(info.st_mode) else "f" if stat.S_ISREG(info.st_mode) else "o"
        seen.append(f"{kind}.{info.st_nlink}.{_identity(info)}")
        if kind != "d":
            break
    return "/".join(seen)


def _folders_fingerprint(workspace: Path) -> str | None:
    """Every folder of the workspace with its identity: a name added, removed or renamed
    anywhere in it changes the modification time of the folder holding it."""
    hashed = hashlib.sha256()
    count = 0
    try:
        for relative, info in _folders(workspace, "", 0):
            count += 1
            if count > MAX_FINGERPRINT_FOLDERS:
                return None
            hashed.update(f"{relative}\x00{_identity(info)}\x00".encode(errors="surrogatepass"))
    except FileNotFoundError:
        return "-"
    except OSError:
        return None
    return hashed.hexdigest()[:32]


def _folders(path: Path, relative: str, depth: int) -> Iterator[tuple[str, os.stat_result]]:
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        yield relative, info  # a link or a file where a folder was: listed as nothing
        return
    yield relative, info
    if depth >= MAX_LIST_DEPTH:
        return
    with os.scandir(path) as entries:
        folders = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    for name in folders:
        try:
            yield from _folders(path / name, f"{relative}{name}/", depth + 1)
        except FileNotFoundError:
            continue  # removed since it was listed
