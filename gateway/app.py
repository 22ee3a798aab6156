"""Composition root: settings → stores → agent → router. Adapters are attached by `run`."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.agents.base import Agent
from gateway.agents.offline import OfflineAgent
from gateway.logs import get_logger
from gateway.presence import Presence
from gateway.router import Router
from gateway.settings import Settings
from gateway.store.kv import KVStore, open_kv
from gateway.store.sessions import SessionStore

log = get_logger(__name__)


class UnknownAgent(ValueError):
    pass


def build_agent(name: str) -> Agent:
    if name == "offline":
        return OfflineAgent()
    raise UnknownAgent(f"unknown agent {name!r}; available: offline")


@dataclass
class Runtime:
    settings: Settings
    store: SessionStore
    kv: KVStore
    presence: Presence
    router: Router

    @classmethod
    async def start(cls, settings: Settings) -> Runtime:
        agent = build_agent(settings.agent)
        store = await SessionStore.open(settings)
        try:
            kv = await open_kv(settings.resolved_kv_url)
        except BaseException:
            await store.close()
            raise
        presence = Presence(
            kv,
            settings.instance_id,
            ttl=settings.presence_ttl_seconds,
            refresh=settings.presence_refresh_seconds,
        )
        cleared = await presence.clear_instance()
        if cleared:
            log.info("cleared presence left by a previous run", keys=cleared)
        router = Router(settings, store, agent, presence)
        return cls(settings, store, kv, presence, router)

    async def close(self) -> None:
        await self.router.close()
        await self.kv.close()
        await self.store.close()
