"""Interactions: INTERACTION_CREATE injection, callbacks, the original response and followups.

discord.py always asks the callback route for ``?with_response=1`` and parses the answer, so
a callback answers 200 with ``{"interaction", "resource"}``. A second response to the same
interaction gets 400 (40060), an unknown interaction or token 404 (10062). Interaction and
webhook routes are authenticated by the token in the URL, not the bot token.
"""

from __future__ import annotations

import copy
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from ..base import JSON, Upload
from . import payloads
from .api import ApiError, invalid_form, unknown
from .messages import FLAG_EPHEMERAL, FLAG_LOADING
from .payloads import CHANNEL_DM, MEMBER_PERMISSIONS, MISSING, Snowflake, sid
from .rest import DiscordRest, RouteRow

# Interaction types and callback types.
INTERACTION_COMMAND = 2
INTERACTION_COMPONENT = 3
INTERACTION_MODAL_SUBMIT = 5
CALLBACK_MESSAGE = 4
CALLBACK_DEFERRED_MESSAGE = 5
CALLBACK_DEFERRED_UPDATE = 6
CALLBACK_UPDATE_MESSAGE = 7
CALLBACK_AUTOCOMPLETE = 8
CALLBACK_MODAL = 9


@dataclass
class _Interaction:
    id: str
    token: str
    type: int
    payload: JSON
    channel_id: str
    guild_id: str | None
    user: JSON
    created: float = field(default_factory=time.monotonic)
    response_type: int | None = None
    original: str | None = None  # message id behind "@original"
    followup_used_loading: bool = False


class DiscordInteractions(DiscordRest):
    """Adds the interaction callback, original response and followup endpoints."""

    # Set by FakeDiscord.__init__.
    interaction_timeout: float | None

    def __init__(self) -> None:
        super().__init__()
        self.modals: list[JSON] = []
        self.autocomplete_results: list[JSON] = []
        self._ephemeral: list[tuple[str, str]] = []
        self._interactions: dict[str, _Interaction] = {}

    # -- test side -----------------------------------------------------------------------------

    def inject_component(
        self,
        user: JSON,
        message: JSON,
        custom_id: str,
        *,
        component_type: int = 2,
        values: list[str] | None = None,
    ) -> JSON:
        """Dispatch INTERACTION_CREATE type 3: ``user`` clicked/selected on ``message``.

        ``message`` is a bot message (from ``sent_messages()`` or a recorded response); its
        latest stored state is sent. ``values`` is for select menus.
        """
        stored = self._stored(message)
        data: JSON = {"custom_id": custom_id, "component_type": component_type}
        if values is not None or component_type != 2:
            data["values"] = list(values or [])
        return self._inject_interaction(
            INTERACTION_COMPONENT, user, stored["channel_id"], data, message=stored
        )

    def inject_modal_submit(
        self,
        user: JSON,
        message: JSON | None,
        custom_id: str,
        fields: dict[str, str],
        *,
        channel_id: Snowflake | None = None,
    ) -> JSON:
        """Dispatch INTERACTION_CREATE type 5: ``user`` submitted a modal with text inputs.

        ``fields`` maps each text input's ``custom_id`` to its value. ``message`` is the
        message whose component opened the modal, or None for a modal opened by a command
        (then ``channel_id`` is needed).
        """
        stored = self._stored(message) if message is not None else None
        if stored is None and channel_id is None:
            raise ValueError("a modal submit needs a message or a channel_id")
        cid = stored["channel_id"] if stored is not None else sid(channel_id)  # type: ignore[arg-type]
        data: JSON = {
            "custom_id": custom_id,
            "components": [
                {"type": 1, "components": [{"type": 4, "custom_id": key, "value": value}]}
                for key, value in fields.items()
            ],
        }
        return self._inject_interaction(INTERACTION_MODAL_SUBMIT, user, cid, data, message=stored)

    @property
    def ephemeral_responses(self) -> list[JSON]:
        """Ephemeral interaction responses and followups (latest state)."""
        return self._collect(self._ephemeral, None)

    # -- internals -----------------------------------------------------------------------------

    def _route_table(self) -> list[RouteRow]:
        return [
            *super()._route_table(),
            ("POST", "/interactions/{iid}/{token}/callback", self._interaction_callback, False),
            ("GET", "/webhooks/{app}/{token}/messages/@original", self._get_original, False),
            ("PATCH", "/webhooks/{app}/{token}/messages/@original", self._edit_original, False),
            ("DELETE", "/webhooks/{app}/{token}/messages/@original", self._delete_original, False),
            ("POST", "/webhooks/{app}/{token}", self._followup, False),
            ("GET", "/webhooks/{app}/{token}/messages/{mid}", self._get_followup, False),
            ("PATCH", "/webhooks/{app}/{token}/messages/{mid}", self._edit_followup, False),
            ("DELETE", "/webhooks/{app}/{token}/messages/{mid}", self._delete_followup, False),
        ]

    def _interaction_payload(
        self,
        itype: int,
        user_obj: JSON,
        channel_id: str,
        data: JSON,
        guild_id: str | None,
        message: JSON | None,
    ) -> JSON:
        iid = self._snowflake()
        token = f"aW50ZXJhY3Rpb246{iid}.{secrets.token_urlsafe(32)}"
        channel = self._channels.get(channel_id) or {"id": channel_id, "type": CHANNEL_DM}
        invoker = user_obj if guild_id is None else self._member_with_user(guild_id, user_obj)
        return payloads.interaction(
            iid,
            token,
            self.application_id,
            itype,
            data,
            channel,
            invoker,
            guild_id=guild_id,
            message=message,
        )

    def _member_with_user(self, guild_id: str, user_obj: JSON) -> JSON:
        result = self._member_without_user(guild_id, user_obj["id"])
        result["user"] = copy.deepcopy(user_obj)
        result["permissions"] = MEMBER_PERMISSIONS
        return result

    def _inject_interaction(
        self,
        itype: int,
        user_obj: JSON,
        channel_id: str,
        data: JSON,
        *,
        message: JSON | None = None,
        guild_id: str | None = MISSING,
    ) -> JSON:
        gid = self._guild_of(channel_id) if guild_id is MISSING else guild_id
        if message is not None and guild_id is MISSING:
            gid = message.get("guild_id", gid)
        self._users.setdefault(user_obj["id"], copy.deepcopy(user_obj))
        payload = self._interaction_payload(itype, user_obj, channel_id, data, gid, message)
        self._interactions[payload["id"]] = _Interaction(
            id=payload["id"],
            token=payload["token"],
            type=itype,
            payload=payload,
            channel_id=channel_id,
            guild_id=gid,
            user=copy.deepcopy(user_obj),
        )
        self._dispatch("INTERACTION_CREATE", payload)
        return copy.deepcopy(payload)

    def _interaction_or_404(self, iid: str, token: str) -> _Interaction:
        found = self._interactions.get(iid)
        if found is None or found.token != token:
            raise unknown("interaction", 10062)
        return found

    def _interaction_by_token(self, app: str, token: str) -> _Interaction:
        if app != self.application_id:
            raise unknown("Webhook", 10015)
        for found in self._interactions.values():
            if found.token == token:
                return found
        raise unknown("Webhook", 10015)

    def _interaction_message(
        self, interaction: _Interaction, body: JSON, files: list[Upload], *, loading: bool = False
    ) -> JSON:
        data = body.get("data") or {}
        message = self._bot_message(interaction.channel_id, interaction.guild_id, data, files)
        message["application_id"] = self.application_id
        message["webhook_id"] = self.application_id
        message["type"] = 20 if interaction.type == INTERACTION_COMMAND else 0
        message["interaction_metadata"] = {
            "id": interaction.id,
            "type": interaction.type,
            "user": copy.deepcopy(interaction.user),
            "authorizing_integration_owners": interaction.payload.get(
                "authorizing_integration_owners", {}
            ),
        }
        flags = int(data.get("flags") or 0)
        message["flags"] = flags | (FLAG_LOADING if loading else 0)
        key = (interaction.channel_id, message["id"])
        self._messages[key] = message
        if flags & FLAG_EPHEMERAL:
            self._ephemeral.append(key)
        else:
            self._bot_sent.append(key)
            self._dispatch("MESSAGE_CREATE", message)
        return message

    async def _interaction_callback(
        self, iid: str, token: str, *, body: JSON, files: list[Upload], query: Any, **_: Any
    ) -> JSON | None:
        interaction = self._interaction_or_404(iid, token)
        if (
            self.interaction_timeout is not None
            and interaction.response_type is None
            and time.monotonic() - interaction.created > self.interaction_timeout
        ):
            raise unknown("interaction", 10062)
        if interaction.response_type is not None:
            raise ApiError(400, "Interaction has already been acknowledged.", 40060)
        ctype = int(body.get("type", 0))
        data = body.get("data") or {}
        message: JSON | None = None
        ephemeral = bool(int(data.get("flags") or 0) & FLAG_EPHEMERAL)
        component_message = interaction.payload.get("message")
        if ctype == CALLBACK_MESSAGE:
            self._check_content(data, require=True, files=files)
            message = self._interaction_message(interaction, body, files)
            interaction.original = message["id"]
        elif ctype == CALLBACK_DEFERRED_MESSAGE:
            message = self._interaction_message(interaction, body, files, loading=True)
            interaction.original = message["id"]
        elif ctype in (CALLBACK_DEFERRED_UPDATE, CALLBACK_UPDATE_MESSAGE):
            if component_message is None:
                raise ApiError(
                    400, "Interaction callback type not valid for this interaction", 50035
                )
            interaction.original = component_message["id"]
            ephemeral = bool(component_message.get("flags", 0) & FLAG_EPHEMERAL)
            if ctype == CALLBACK_UPDATE_MESSAGE:
                stored = self._message_or_404(interaction.channel_id, component_message["id"])
                self._check_content(data, require=False, files=files)
                message = self._edit(stored, data, files)
        elif ctype == CALLBACK_MODAL:
            if not data.get("custom_id") or not data.get("title") or not data.get("components"):
                raise invalid_form(
                    "data", "MODAL_INVALID", "A modal needs custom_id, title and components."
                )
            self.modals.append({"interaction_id": iid, **copy.deepcopy(data)})
        elif ctype == CALLBACK_AUTOCOMPLETE:
            self.autocomplete_results.append({"interaction_id": iid, **copy.deepcopy(data)})
        else:
            raise invalid_form(
                "type", "BASE_TYPE_CHOICES", "Value must be one of (4, 5, 6, 7, 8, 9)."
            )
        interaction.response_type = ctype
        if str(query.get("with_response", "")).lower() not in ("1", "true"):
            return None
        answer: JSON = {
            "interaction": {
                "id": iid,
                "type": interaction.type,
                "response_message_id": interaction.original,
                "response_message_loading": ctype == CALLBACK_DEFERRED_MESSAGE,
                "response_message_ephemeral": ephemeral,
            },
            "resource": {"type": ctype},
        }
        if message is not None:
            answer["resource"]["message"] = copy.deepcopy(message)
        return answer

    def _original(self, interaction: _Interaction) -> JSON:
        if interaction.original is None:
            raise unknown("Message", 10008)
        return self._message_or_404(interaction.channel_id, interaction.original)

    async def _get_original(self, app: str, token: str, **_: Any) -> JSON:
        return copy.deepcopy(self._original(self._interaction_by_token(app, token)))

    async def _edit_original(
        self, app: str, token: str, *, body: JSON, files: list[Upload], **_: Any
    ) -> JSON:
        interaction = self._interaction_by_token(app, token)
        message = self._original(interaction)
        message["flags"] = message.get("flags", 0) & ~FLAG_LOADING
        return self._edit(message, body, files)

    async def _delete_original(self, app: str, token: str, **_: Any) -> None:
        interaction = self._interaction_by_token(app, token)
        message = self._original(interaction)
        self._delete(interaction.channel_id, message["id"])

    async def _followup(
        self, app: str, token: str, *, body: JSON, files: list[Upload], query: Any, **_: Any
    ) -> JSON | None:
        interaction = self._interaction_by_token(app, token)
        if interaction.response_type is None:
            raise unknown("Webhook", 10015)
        self._check_content(body, require=True, files=files)
        original = None
        if interaction.original is not None:
            original = self._messages.get((interaction.channel_id, interaction.original))
        if (
            interaction.response_type == CALLBACK_DEFERRED_MESSAGE
            and not interaction.followup_used_loading
            and original is not None
            and original.get("flags", 0) & FLAG_LOADING
        ):
            # As on Discord: the first followup after a deferral fills the "thinking" message.
            interaction.followup_used_loading = True
            original["flags"] = original.get("flags", 0) & ~FLAG_LOADING
            result = self._edit(original, body, files)
        else:
            result = copy.deepcopy(self._interaction_message(interaction, {"data": body}, files))
        if str(query.get("wait", "")).lower() in ("1", "true"):
            return result
        return None

    def _followup_message(self, app: str, token: str, mid: str) -> tuple[_Interaction, JSON]:
        interaction = self._interaction_by_token(app, token)
        return interaction, self._message_or_404(interaction.channel_id, mid)

    async def _get_followup(self, app: str, token: str, mid: str, **_: Any) -> JSON:
        return copy.deepcopy(self._followup_message(app, token, mid)[1])

    async def _edit_followup(
        self, app: str, token: str, mid: str, *, body: JSON, files: list[Upload], **_: Any
    ) -> JSON:
        return self._edit(self._followup_message(app, token, mid)[1], body, files)

    async def _delete_followup(self, app: str, token: str, mid: str, **_: Any) -> None:
        interaction, message = self._followup_message(app, token, mid)
        self._delete(interaction.channel_id, message["id"])
