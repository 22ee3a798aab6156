"""`/attach PATH`: a file from this machine goes with the window's next message.

The file is read when it is attached (a file that changes afterwards goes as it was), in a
thread, and sent base64 in the message's JSON body: the API takes at most 1 MiB a request, so
a file is at most `MAX_ATTACH_BYTES` and all attached files together must fit too.
"""

from __future__ import annotations

import asyncio
import base64
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path

# Base64 makes 4 bytes of 3; what is left of the 1 MiB body is for the text and the JSON.
MAX_ATTACH_BYTES = 700 * 1024


class AttachRefused(Exception):
    pass


@dataclass
class Attached:
    """The files waiting for the next message."""

    files: list[dict[str, str]] = field(default_factory=list)
    size: int = 0

    async def add(self, path_text: str) -> str:
        """Read a file for the next message; a line saying what was attached."""
        if not path_text:
            raise AttachRefused("usage: /attach PATH")
        path = Path(path_text)
        try:
            data = await asyncio.to_thread(_read, path)
        except OSError as exc:
            raise AttachRefused(f"cannot read {path}: {exc.strerror or exc}") from None
        if self.size + len(data) > MAX_ATTACH_BYTES:
            raise AttachRefused(
                f"{path.name} is too large: the files of one message may have "
                f"{MAX_ATTACH_BYTES} bytes together"
            )
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        encoded = base64.b64encode(data).decode("ascii")
        self.files.append({"name": path.name, "mime": mime, "data": encoded})
        self.size += len(data)
        return f"attached {path.name} ({mime}, {len(data)} bytes): it goes with your next message"

    def take(self) -> list[dict[str, str]]:
        files, self.files, self.size = self.files, [], 0
        return files

    def give_back(self, files: list[dict[str, str]]) -> None:
        """Files of a message that could not be sent wait for the next one again."""
        self.files = [*files, *self.files]
        self.size = sum(len(base64.b64decode(f["data"])) for f in self.files)


def _read(path: Path) -> bytes:
    with path.expanduser().open("rb") as file:
        # One byte past the limit is enough to know it is too large.
        return file.read(MAX_ATTACH_BYTES + 1)
