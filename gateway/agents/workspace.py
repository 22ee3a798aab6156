"""Files in a session's workspace, reached without ever following a link.

Agents with tools of their own (the claude-code CLI runs a shell there) can plant links in the
workspace, or turn the workspace folder itself into one, so its contents are treated as hostile.
Every operation starts from the session folder (the gateway's own) and walks one name at a time
through directory descriptors opened with `O_NOFOLLOW`: a link, or anything but a plain folder,
on the way is refused. Writes go to a fresh file created exclusively under a random name beside
the target, then renamed inside that same folder. Errors name files relative to the workspace,
never by their path on the server.

Everything here blocks; callers run it in a thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

# A folder deeper than this is not listed: a hostile tree must not exhaust the stack.
MAX_LIST_DEPTH = 64

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a planted FIFO must fail the type check, not wait for a writer.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class WorkspaceError(Exception):
    """Refused or failed; the message names the file relative to the workspace."""


class NoSuchFile(WorkspaceError):
    pass


def file_parts(name: object) -> tuple[str, ...]:
    """The components of a relative file name, refused when it could leave the workspace."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise WorkspaceError("a file name (a non-empty string) is required")
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise WorkspaceError(f"{name!r} is outside the workspace; use a relative name")
    if not path.parts:
        raise WorkspaceError(f"{name!r} is not a file name")
    return path.parts


class Workspace:
    def __init__(self, root: Path) -> None:
        self._session_dir = root.parent
        self._name = root.name

    def read(self, name: str, limit: int | None = None) -> bytes | None:
        """Up to `limit` bytes of a plain file (all of it for None); None when there is none."""
        parts = file_parts(name)
        try:
            with (
                self._folder(parts[:-1], create=False) as folder,
                _plainly(repr(name)),
                os.fdopen(os.open(parts[-1], _READ, dir_fd=folder), "rb") as file,
            ):
                info = os.fstat(file.fileno())
                _require_plain_file(info, name)
                if info.st_nlink > 1:
                    # A hard link can bring in a file from anywhere on the same disk.
                    raise WorkspaceError(f"{name!r} has other hard links; it is not read")
                return file.read(-1 if limit is None else limit)
        except NoSuchFile:
            return None

    def write(self, name: str, data: bytes) -> None:
        """Create or replace a file, making its folders; readers never see half of it."""
        parts = file_parts(name)
        with self._folder(parts[:-1], create=True) as folder, _plainly(repr(name)):
            temporary = f".{secrets.token_hex(8)}.tmp"
            fd = os.open(temporary, _CREATE, 0o600, dir_fd=folder)
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                os.rename(temporary, parts[-1], src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=folder)
                raise
            os.fsync(folder)

    def delete(self, name: str) -> None:
        parts = file_parts(name)
        with self._folder(parts[:-1], create=False) as folder, _plainly(repr(name)):
            _require_plain_file(os.stat(parts[-1], dir_fd=folder, follow_symlinks=False), name)
            os.unlink(parts[-1], dir_fd=folder)

    def list(self) -> list[str]:
        """The plain files, by relative name; links (and what they point to) are left out."""
        try:
            with self._folder((), create=False) as root:
                return sorted(_walk(root, "", 0))
        except NoSuchFile:
            return []

    @contextlib.contextmanager
    def _folder(self, parts: Sequence[str], *, create: bool) -> Iterator[int]:
        """A descriptor of the folder `parts` below the workspace (the workspace for none)."""
        try:
            fd = os.open(self._session_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NoSuchFile("the session folder is gone") from None
        try:
            for depth, part in enumerate((self._name, *parts)):
                shown = repr("/".join(parts[:depth])) if depth else "the workspace folder"
                child = _open_folder(fd, part, shown, create=create)
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)


def _open_folder(parent: int, name: str, shown: str, *, create: bool) -> int:
    with _plainly(shown):
        try:
            return os.open(name, _DIR, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
        with contextlib.suppress(FileExistsError):  # made meanwhile: checked when opened
            os.mkdir(name, 0o700, dir_fd=parent)
        return os.open(name, _DIR, dir_fd=parent)


def _walk(folder: int, prefix: str, depth: int) -> Iterator[str]:
    with os.scandir(folder) as entries:
        found = list(entries)
    for entry in found:
        if entry.is_file(follow_symlinks=False):
            if entry.stat(follow_symlinks=False).st_nlink == 1:  # see `read` on hard links
                yield prefix + entry.name
        elif entry.is_dir(follow_symlinks=False) and depth < MAX_LIST_DEPTH:
            try:
                child = os.open(entry.name, _DIR, dir_fd=folder)
            except OSError:  # replaced by a link, or removed, since it was listed
                continue
            try:
                yield from _walk(child, f"{prefix}{entry.name}/", depth + 1)
            finally:
                os.close(child)


def _require_plain_file(info: os.stat_result, name: str) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise WorkspaceError(f"{name!r} is a link; links in the workspace are not followed")
    if stat.S_ISDIR(info.st_mode):
        raise WorkspaceError(f"{name!r} is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise WorkspaceError(f"{name!r} is not a regular file")


@contextlib.contextmanager
def _plainly(shown: str) -> Iterator[None]:
    """OS errors as workspace errors that say `shown`, never a path on the server."""
    try:
        yield
    except FileNotFoundError:
        raise NoSuchFile(f"{shown} does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            problem = "is a link; links in the workspace are not followed"
        elif exc.errno == errno.ENOTDIR:
            problem = "is not a folder (links in the workspace are not followed)"
        else:
            problem = f"cannot be used: {exc.strerror or type(exc).__name__}"
        raise WorkspaceError(f"{shown} {problem}") from None
