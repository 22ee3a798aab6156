"""Several instances on one archive: a session runs where its lease is held, the others hand
it over (`ownership`), follow its tasks and answer its prompts through the bus (`relay`),
and each delivery is claimed by the instance that sends it."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from gateway.auth import Authority
from gateway.bus import Bus
from gateway.cluster.ownership import Ownership
from gateway.cluster.relay import Relay
from gateway.engine.cluster import CancelHere, TakeUp
from gateway.engine.dispatch import Dispatch
from gateway.engine.prompts import Prompts
from gateway.engine.tasks import TaskTable
from gateway.leases import Leases
from gateway.store.journals import PromptAnswers
from gateway.store.sessions import SessionStore


class SeveralInstances:
    def __init__(
        self, leases: Leases, bus: Bus, instance_id: str, lease_ttl_seconds: float
    ) -> None:
        self.leases = leases
        self.bus = bus
        self.claimant: str | None = instance_id
        # A claim outlives its instance's leases, so a delivery is not sent twice while the
        # sessions of a dead instance move.
        self.claim_seconds = 2 * lease_ttl_seconds

    def answers(self, store: SessionStore) -> PromptAnswers | None:
        return store

    def owner(
        self,
        store: SessionStore,
        *,
        take_up: TakeUp,
        interrupt: Callable[[str], Coroutine[Any, Any, None]],
        is_busy: Callable[[str], bool],
        is_live: Callable[[str], bool],
    ) -> Ownership:
        return Ownership(
            self.leases,
            self.bus,
            store,
            take_up=take_up,
            interrupt=interrupt,
            is_busy=is_busy,
            is_live=is_live,
        )

    def elsewhere(
        self,
        *,
        tasks: TaskTable,
        dispatch: Dispatch,
        prompts: Prompts,
        store: SessionStore,
        authority: Authority,
        cancel_here: CancelHere,
    ) -> Relay:
        return Relay(
            self.bus,
            tasks=tasks,
            dispatch=dispatch,
            prompts=prompts,
            store=store,
            authority=authority,
            cancel_here=cancel_here,
        )
