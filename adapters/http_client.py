"""A small client of the gateway's HTTP API, used by the `agenvoy` command line."""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from typing import Any

import aiohttp


class GatewayUnavailable(RuntimeError):
    pass


class GatewayError(RuntimeError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({status} {code})")
        self.status, self.code = status, code


@dataclass
class Reply:
    status: int
    body: dict[str, Any]


class GatewayClient:
    def __init__(self, base_url: str, token: str = "", sender: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"X-Agenvoy-Sender": sender or getpass.getuser()}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> GatewayClient:
        self._session = aiohttp.ClientSession(
            headers=self.headers, timeout=aiohttp.ClientTimeout(total=None, connect=5)
        )
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Reply:
        assert self._session is not None, "use the client as `async with`"
        try:
            async with self._session.request(method, self.base_url + path, json=body) as resp:
                data = await resp.json(content_type=None)
        except aiohttp.ClientConnectionError as exc:
            raise GatewayUnavailable(
                f"the gateway is not running at {self.base_url}; start it with `agenvoy run`"
            ) from exc
        if resp.status >= 400:
            error = (data or {}).get("error", {})
            raise GatewayError(resp.status, error.get("code", "?"), error.get("message", ""))
        return Reply(resp.status, data or {})

    async def send(
        self, content: str, *, session_id: str | None, persist: bool, wait: float
    ) -> Reply:
        body: dict[str, Any] = {"content": content, "persist": persist, "wait": wait}
        if session_id:
            body["session_id"] = session_id
        return await self.call("POST", "/v1/send", body)

    async def task(self, session_id: str, task_hash: str, wait: float) -> Reply:
        return await self.call("GET", f"/v1/session/{session_id}/task/{task_hash}?wait={wait}")

    async def answer(
        self,
        session_id: str,
        task_hash: str,
        *,
        approve: bool | None = None,
        text: str | None = None,
    ) -> Reply:
        body: dict[str, Any] = {"approve": approve} if text is None else {"answer": text}
        return await self.call("POST", f"/v1/session/{session_id}/pending/{task_hash}", body)

    async def pending(self, session_id: str | None = None) -> list[dict[str, Any]]:
        if session_id:
            sessions = [session_id]
        else:
            listing = await self.call("GET", "/v1/sessions")
            sessions = [s["session_id"] for s in listing.body.get("sessions", [])]
        prompts: list[dict[str, Any]] = []
        for sid in sessions:
            reply = await self.call("GET", f"/v1/session/{sid}/pending")
            prompts.extend(reply.body.get("pending", []))
        return prompts
