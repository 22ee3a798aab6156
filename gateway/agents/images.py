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

Decoding is what costs: a small file can describe a picture that takes hundreds of megabytes
once decoded. A JPEG is decoded at the smallest scale its decoder offers that still covers the
size it is sent at (1/2, 1/4 or 1/8); any other picture is refused, before a pixel is decoded,
when what it would take — its pixels at the bytes each takes decoded, plus the working copies
that scaling makes — is past `image_decode_budget_bytes`. At most `image_decode_concurrency`
images decode at once; the others wait for a slot (`DecodeGate`).
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

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
# Bytes a pixel takes in Pillow's memory once decoded, by mode; any mode not listed takes 4
# (RGB is stored padded to four bytes).
DECODED_PIXEL_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}
# Scaling makes working copies at four bytes a pixel: the RGB or RGBA picture converted from
# another mode, for one with transparency the premultiplied copy the filter reads, and the
# filter's own intermediate.
WORKING_COPY_BYTES = 4

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Limits:
    """What a picture may be once sent, and what decoding it may cost."""

    max_side: int
    max_bytes: int
    decode_budget: int

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(
            settings.image_max_side, settings.image_max_bytes, settings.image_decode_budget_bytes
        )


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


class DecodeGate:
    """At most `limit` decodes at once; the others wait their turn.

    A slot is given back when the decoding thread ends, not when its caller stops waiting: a
    canceled task cannot stop a thread, and its decode still holds the memory it took.
    """

    def __init__(self, limit: int) -> None:
        self._slots = asyncio.Semaphore(limit)
        self.limit = limit
        self.running = 0
        self.waiting = 0

    async def run(self, work: Callable[[], T]) -> T:
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        job = asyncio.ensure_future(asyncio.to_thread(work))
        job.add_done_callback(self._finished)
        return await asyncio.shield(job)

    def _finished(self, job: asyncio.Future[T]) -> None:
        self.running -= 1
        self._slots.release()
        if not job.cancelled():
            job.exception()  # read here too, so one whose caller left is not reported unread


def sees_images(settings: Settings, model: str) -> bool:
    """Whether `model` is shown images (`vision`, `text_only_models`)."""
    if not settings.vision:
        return False
    patterns = (p.strip() for p in settings.text_only_models.split(","))
    return not any(p and fnmatch.fnmatchcase(model, p) for p in patterns)


def is_image(attachment: Attachment) -> bool:
    return attachment.mime.startswith("image/") and bool(attachment.path)


async def pictures_of(
    attachments: Sequence[Attachment],
    workspace: Path,
    settings: Settings,
    model: str,
    gate: DecodeGate,
) -> Pictures:
    """The saved images among `attachments`, ready to send to `model`."""
    found = Pictures()
    images = [a for a in attachments if is_image(a)]
    if not images or not sees_images(settings, model):
        return found
    limits = Limits.of(settings)
    for attachment in images:
        try:
            picture = await gate.run(partial(_load, Workspace(workspace), attachment, limits))
        except Unreadable as exc:
            log.info("image not shown", name=attachment.name, reason=str(exc))
            found.notes.append(
                f"[attachment {attachment.name} could not be read as an image: {exc}]"
            )
            continue
        found.shown.append(picture)
    return found


def _load(workspace: Workspace, attachment: Attachment, limits: Limits) -> Picture:
    name = attachment.path.removeprefix(WORKSPACE_PREFIX)
    try:
        data = workspace.read(name)
    except WorkspaceError as exc:
        raise Unreadable(str(exc)) from exc
    if data is None:
        raise Unreadable("the file is gone from the workspace")
    return prepare(attachment.name, data, limits)


def prepare(name: str, data: bytes, limits: Limits) -> Picture:
    """`data` as an image an API takes, within `limits`."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > MAX_DECODED_PIXELS:
                raise Unreadable(f"{width}x{height} pixels is more than it is allowed to decode")
            kind = image.format or ""
            animated = getattr(image, "n_frames", 1) > 1
            as_is = kind in SENDABLE and not animated
            fits = max(width, height) <= limits.max_side and len(data) <= limits.max_bytes
            if not (as_is and fits):
                # Only JPEG's decoder scales while it decodes; other formats ignore this.
                image.draft(None, _fitted(image.size, limits.max_side))
            _check_cost(image, limits.decode_budget)
            image.load()  # a file cut short or garbled fails here, not at the API
            if as_is and fits:
                return Picture(name, SENDABLE[kind], data, width, height)
            return _reencode(name, image, kind, limits.max_side, limits.max_bytes)
    except Unreadable:
        raise
    # Pillow's decoders raise a wide range of errors on hostile input (OSError, SyntaxError,
    # struct errors, its own DecompressionBombError); any of them means "not shown".
    except Exception as exc:
        raise Unreadable(f"not a picture this gateway can decode ({type(exc).__name__})") from exc


def decode_cost(image: Image.Image) -> int:
    """Bytes decoding and scaling `image` takes at most, at its size as it will be decoded."""
    width, height = image.size
    mode = _working_mode(image)
    # The scaling pass's intermediate is counted as a whole copy, though it is smaller.
    copies = 1 + (image.mode != mode) + (mode == "RGBA")
    per_pixel = DECODED_PIXEL_BYTES.get(image.mode, 4) + WORKING_COPY_BYTES * copies
    return width * height * per_pixel


def _check_cost(image: Image.Image, budget: int) -> None:
    cost = decode_cost(image)
    if cost > budget:
        width, height = image.size
        raise Unreadable(
            f"{width}x{height} pixels would take {_mib(cost)} to decode,"
            f" more than the {_mib(budget)} allowed"
        )


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def _working_mode(image: Image.Image) -> str:
    return "RGBA" if image.mode in ("RGBA", "LA", "P", "PA") else "RGB"


def _fitted(size: tuple[int, int], side: int) -> tuple[int, int]:
    """`size` scaled down to fit a `side` square, keeping its shape."""
    width, height = size
    if max(width, height) <= side:
        return size
    scale = side / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def _scaled(image: Image.Image, side: int) -> Image.Image:
    size = _fitted(image.size, side)
    if size == image.size:
        return image
    # The reducing gap shrinks by whole factors first, so the filter reads a smaller copy.
    return image.resize(size, Image.Resampling.LANCZOS, reducing_gap=2.0)


def _reencode(name: str, image: Image.Image, kind: str, max_side: int, max_bytes: int) -> Picture:
    mode = _working_mode(image)
    frame = image if image.mode == mode else image.convert(mode)
    # Scaled once from the whole picture; each smaller try starts from that smaller copy.
    frame = _scaled(frame, max_side)
    side = max_side
    while True:
        scaled = _scaled(frame, side)
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
