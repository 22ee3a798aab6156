"""The images a message brought, as a vision model is shown them.

Only the new message's images are sent: older messages in the window keep the line that
describes each attachment (where it is saved), so a conversation does not pay for the same
picture on every turn, and the model can still open an older file with its tools.

An image is decoded (in a thread, never on the event loop) before it is sent: whatever the
platform called it, only what Pillow recognises goes out, with the media type of what it is.
JPEG, PNG, GIF and WebP — the types both APIs take — go as they are when within
`image_max_side` and `image_max_bytes`; anything else, an animation, or a picture past those
limits is re-encoded (scaled down, as PNG, or JPEG when that is what it was or PNG is too big).
A file that does not decode, or claims more than `MAX_DECODED_PIXELS`, becomes a line saying it
could not be read: the model answers without it.
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from gateway.agents.workspace import Workspace, WorkspaceError
from gateway.events import Attachment
from gateway.logs import get_logger
from gateway.settings import Settings

log = get_logger(__name__)

SENDABLE = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp"}
# A small file can claim a huge canvas (a decompression bomb): its header is checked before
# any pixel is decoded. 50 megapixels is beyond any phone camera's photo.
MAX_DECODED_PIXELS = 50_000_000
WORKSPACE_PREFIX = "workspace/"


@dataclass(frozen=True, slots=True)
class Picture:
    name: str
    media_type: str
    data: bytes
    width: int
    height: int

    @property
    def base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.base64}"


@dataclass
class Pictures:
    """What of a message's images the model sees: the pictures, and a line for each image
    that could not be shown."""

    shown: list[Picture] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text_with_notes(self, text: str) -> str:
        return "\n".join([text, *self.notes]) if self.notes else text


class Unreadable(Exception):
    """Not an image that can be shown; the message says why."""


def sees_images(settings: Settings, model: str) -> bool:
    """Whether `model` is shown images (`vision`, `text_only_models`)."""
    if not settings.vision:
        return False
    patterns = (p.strip() for p in settings.text_only_models.split(","))
    return not any(p and fnmatch.fnmatchcase(model, p) for p in patterns)


def is_image(attachment: Attachment) -> bool:
    return attachment.mime.startswith("image/") and bool(attachment.path)


async def pictures_of(
    attachments: Sequence[Attachment], workspace: Path, settings: Settings, model: str
) -> Pictures:
    """The saved images among `attachments`, ready to send to `model`."""
    found = Pictures()
    images = [a for a in attachments if is_image(a)]
    if not images or not sees_images(settings, model):
        return found
    for attachment in images:
        try:
            picture = await asyncio.to_thread(
                _load,
                Workspace(workspace),
                attachment,
                settings.image_max_side,
                settings.image_max_bytes,
            )
        except Unreadable as exc:
            log.info("image not shown", name=attachment.name, reason=str(exc))
            found.notes.append(
                f"[attachment {attachment.name} could not be read as an image: {exc}]"
            )
            continue
        found.shown.append(picture)
    return found


def _load(workspace: Workspace, attachment: Attachment, max_side: int, max_bytes: int) -> Picture:
    name = attachment.path.removeprefix(WORKSPACE_PREFIX)
    try:
        data = workspace.read(name)
    except WorkspaceError as exc:
        raise Unreadable(str(exc)) from exc
    if data is None:
        raise Unreadable("the file is gone from the workspace")
    return prepare(attachment.name, data, max_side, max_bytes)


def prepare(name: str, data: bytes, max_side: int, max_bytes: int) -> Picture:
    """`data` as an image an API takes, within `max_side` and `max_bytes`."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > MAX_DECODED_PIXELS:
                raise Unreadable(f"{width}x{height} pixels is more than it is allowed to decode")
            kind = image.format or ""
            animated = getattr(image, "n_frames", 1) > 1
            image.load()  # a file cut short or garbled fails here, not at the API
            as_is = kind in SENDABLE and not animated
            if as_is and max(width, height) <= max_side and len(data) <= max_bytes:
                return Picture(name, SENDABLE[kind], data, width, height)
            return _reencode(name, image, kind, max_side, max_bytes)
    except Unreadable:
        raise
    # Pillow's decoders raise a wide range of errors on hostile input (OSError, SyntaxError,
    # struct errors, its own DecompressionBombError); any of them means "not shown".
    except Exception as exc:
        raise Unreadable(f"not a picture this gateway can decode ({type(exc).__name__})") from exc


def _reencode(name: str, image: Image.Image, kind: str, max_side: int, max_bytes: int) -> Picture:
    frame = image.convert("RGBA" if image.mode in ("RGBA", "LA", "P", "PA") else "RGB")
    side = max_side
    while True:
        scaled = frame.copy()
        scaled.thumbnail((side, side), Image.Resampling.LANCZOS)
        # A photo stays a JPEG; other pictures (screenshots, drawings) keep sharp edges as PNG.
        encoded, media_type = _encode(scaled, jpeg=kind == "JPEG")
        if len(encoded) > max_bytes and media_type == "image/png":
            encoded, media_type = _encode(scaled, jpeg=True)
        if len(encoded) <= max_bytes:
            return Picture(name, media_type, encoded, scaled.width, scaled.height)
        if side <= 64:
            raise Unreadable("it does not fit the size limit even scaled down")
        side = int(side * 0.75)


def _encode(image: Image.Image, *, jpeg: bool) -> tuple[bytes, str]:
    out = io.BytesIO()
    if jpeg:
        image.convert("RGB").save(out, "JPEG", quality=85)
        return out.getvalue(), "image/jpeg"
    image.save(out, "PNG", optimize=True)
    return out.getvalue(), "image/png"
