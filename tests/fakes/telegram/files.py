"""Files: what getFile and the download route serve, and the file objects messages carry."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass

from aiohttp import web

from ..base import JSON
from .api import ApiError, error_response
from .state import TelegramState


@dataclass
class StoredFile:
    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes


def file_object(stored: StoredFile) -> JSON:
    """The ``File`` that getFile answers."""
    return {
        "file_id": stored.file_id,
        "file_unique_id": stored.file_unique_id,
        "file_size": len(stored.data),
        "file_path": stored.file_path,
    }


def photo_size(stored: StoredFile) -> JSON:
    """A ``PhotoSize``; one size is enough for clients that take the largest."""
    return {
        "file_id": stored.file_id,
        "file_unique_id": stored.file_unique_id,
        "width": 320,
        "height": 320,
        "file_size": len(stored.data),
    }


class TelegramFiles(TelegramState):
    """Files uploaded by the bot, injected with a message or registered by the test."""

    def __init__(self) -> None:
        super().__init__()
        self._file_ids = itertools.count(1)
        self._files: dict[str, StoredFile] = {}
        self._files_by_path: dict[str, StoredFile] = {}

    # -- test side -----------------------------------------------------------------------------

    def register_file(self, file_id: str, data: bytes, file_path: str | None = None) -> JSON:
        """Make ``getFile(file_id)`` and the download route serve ``data``; returns the File."""
        stored = StoredFile(
            file_id=file_id,
            file_unique_id=f"u{file_id}",
            file_path=file_path or f"documents/{file_id}",
            data=data,
        )
        self._store_file(stored)
        return file_object(stored)

    # -- internals -----------------------------------------------------------------------------

    async def _handle_download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return error_response(401, "Unauthorized")
        stored = self._files_by_path.get(request.match_info["file_path"])
        if stored is None:
            return error_response(404, "Not Found")
        return web.Response(body=stored.data, content_type="application/octet-stream")

    async def _get_file(self, params: JSON) -> JSON:
        stored = self._files.get(str(params.get("file_id", "")))
        if stored is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        return file_object(stored)

    def _new_file(self, data: bytes, file_path: str) -> StoredFile:
        number = next(self._file_ids)
        return StoredFile(
            file_id=f"FILE{number:06d}",
            file_unique_id=f"UNIQ{number:06d}",
            file_path=f"{file_path.rsplit('/', 1)[0]}/file_{number}_{file_path.rsplit('/', 1)[-1]}",
            data=data,
        )

    def _store_file(self, stored: StoredFile) -> None:
        self._files[stored.file_id] = stored
        self._files_by_path[stored.file_path] = stored

    def _document_object(
        self,
        document: JSON | tuple[str, bytes] | tuple[str, bytes, str],
        files: list[StoredFile],
    ) -> JSON:
        if isinstance(document, dict):
            return copy.deepcopy(document)
        name, data = document[0], document[1]
        stored = self._new_file(data, f"documents/{name}")
        files.append(stored)
        result: JSON = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_name": name,
            "file_size": len(data),
        }
        if len(document) == 3:
            result["mime_type"] = document[2]
        return result

    def _photo_object(self, photo: bytes | list[JSON], files: list[StoredFile]) -> list[JSON]:
        if isinstance(photo, list):
            return copy.deepcopy(photo)
        stored = self._new_file(photo, "photos/photo.jpg")
        files.append(stored)
        return [photo_size(stored)]
