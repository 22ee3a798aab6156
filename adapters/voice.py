"""Transcribing the voice notes and audio files that come with a message.

A message's audio is transcribed while the message holds its session's turn, before it is
archived: the transcript is part of the stored text (`[voice note transcript, <name>] ...`),
so every agent, the window, the summary and the full-text search see it, and the archive
keeps its order. A crash before the message is stored loses nothing that was stored: the
message is in the same state as one whose attachment was still downloading (taken again if the
platform delivers it again). A transcription that fails or times out leaves a line saying so;
the message goes on without it.

The call goes to the OpenAI-compatible `/audio/transcriptions` endpoint of the openai
settings (`openai_base_url`, `openai_api_key`) with `transcribe_model`, as a multipart upload.
"""

from __future__ import annotations

import aiohttp

from adapters.attachments import Staged
from gateway.events import Attachment
from gateway.logs import get_logger
from gateway.settings import Settings

log = get_logger(__name__)

# OpenAI's limit for one upload to the endpoint.
MAX_AUDIO_BYTES = 25 * 1024 * 1024


class TranscriptionFailed(Exception):
    pass


def is_audio(attachment: Attachment) -> bool:
    return attachment.mime.startswith("audio/")


async def with_transcripts(settings: Settings, text: str, staged: Staged) -> str:
    """`text` and the transcripts of the message's voice notes, when transcribing is on."""
    audio = [(a, staged.data_of(a)) for a in staged.attachments if is_audio(a)]
    if not audio:
        return text
    lines = await transcript_lines(settings, audio, settings.max_message_chars - len(text) - 1)
    return "\n".join([text, *lines])


async def transcript_lines(
    settings: Settings, audio: list[tuple[Attachment, bytes | None]], room: int
) -> list[str]:
    """A line per audio file: its transcript, or why there is none. The transcripts together
    stay within `room` characters (the message's length limit), cut short if need be."""
    if not settings.transcribe_model:
        return []
    lines: list[str] = []
    for attachment, data in audio:
        if data is None:
            lines.append(f"[voice note {attachment.name} not transcribed: it was not downloaded]")
            continue
        try:
            text = await transcribe(settings, attachment, data)
        except TranscriptionFailed as exc:
            log.warning("transcription failed", name=attachment.name, error=str(exc))
            lines.append(f"[voice note {attachment.name} could not be transcribed: {exc}]")
            continue
        head = f"[voice note transcript, {attachment.name}] "
        left = room - sum(len(line) + 1 for line in lines) - len(head) - 1
        if len(text) > left:
            text = text[: max(left - 12, 0)] + " [cut short]"
        lines.append(head + text)
    return lines


async def transcribe(settings: Settings, attachment: Attachment, data: bytes) -> str:
    if len(data) > MAX_AUDIO_BYTES:
        raise TranscriptionFailed("it is larger than the 25 MB the endpoint takes")
    url = f"{settings.openai_base_url.rstrip('/')}/audio/transcriptions"
    key = settings.openai_api_key
    headers = {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}
    form = aiohttp.FormData()
    form.add_field("model", settings.transcribe_model)
    form.add_field("response_format", "json")
    form.add_field("file", data, filename=attachment.name, content_type=attachment.mime)
    timeout = aiohttp.ClientTimeout(total=settings.openai_timeout_seconds)
    try:
        # Voice notes are few: a session per call keeps no connection open between them.
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.post(url, data=form, headers=headers) as resp,
        ):
            if resp.status >= 400:
                raise TranscriptionFailed(f"HTTP {resp.status}{await _reason(resp)}")
            body = await resp.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        raise TranscriptionFailed(f"the endpoint did not answer ({type(exc).__name__})") from exc
    text = body.get("text") if isinstance(body, dict) else None
    if not isinstance(text, str):
        raise TranscriptionFailed("the answer held no text")
    # A JSON answer can carry lone surrogates, which the archive cannot store.
    text = text.encode("utf-8", "replace").decode("utf-8").strip()
    return text or "(nothing was said)"


async def _reason(resp: aiohttp.ClientResponse) -> str:
    """The error message of a refusal, as OpenAI-compatible servers put it, for the note."""
    try:
        body = await resp.json(content_type=None)
        message = body["error"]["message"]
    except (ValueError, KeyError, TypeError, aiohttp.ClientError):
        return ""
    return f": {str(message)[:200]}" if message else ""
