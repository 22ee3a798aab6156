"""Several instances on one archive: a session runs where its lease is held, the others hand
it over (`ownership`), follow its tasks and answer its prompts through the bus (`relay`),
and each delivery is claimed by the instance that sends it."""

from __future__ import annotations

from gateway.bus import Bus
from gateway.cluster.ownership import Ownership
from gateway.cluster.relay import Relay
from gateway.engine.cluster import OwnerParts, RelayParts
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

    def owner(self, parts: OwnerParts) -> Ownership:
        return Ownership(
            self.leases,
            self.bus,
            parts.store,
            take_up=parts.take_up,
            interrupt=parts.interrupt,
            is_busy=parts.is_busy,
            is_live=parts.is_live,
        )

    def elsewhere(self, parts: RelayParts) -> Relay:
        return Relay(
            self.bus,
            tasks=parts.tasks,
            dispatch=parts.dispatch,
            prompts=parts.prompts,
            store=parts.store,
            authority=parts.authority,
            cancel_here=parts.cancel_here,
        )
