"""Chat members: who administers a group (getChatAdministrators, getChatMember). A test names
a chat's creator and administrators; everyone else is an ordinary member."""

from __future__ import annotations

import copy

from ..base import JSON
from .api import ApiError
from .methods import TelegramMethods

NO_ADMINS_IN_PRIVATE = "Bad Request: there are no administrators in the private chat"

# What the Bot API says an administrator may do; the fake grants all but promoting others.
_ADMIN_RIGHTS: JSON = {
    "can_be_edited": False,
    "is_anonymous": False,
    "can_manage_chat": True,
    "can_delete_messages": True,
    "can_manage_video_chats": True,
    "can_restrict_members": True,
    "can_promote_members": False,
    "can_change_info": True,
    "can_invite_users": True,
    "can_post_stories": True,
    "can_edit_stories": True,
    "can_delete_stories": True,
    "can_pin_messages": True,
}


class TelegramMembers(TelegramMethods):
    def __init__(self) -> None:
        super().__init__()
        # chat id -> user id -> (user, "creator" | "administrator")
        self._admins: dict[int, dict[int, tuple[JSON, str]]] = {}

    # -- test side -----------------------------------------------------------------------------

    def set_admin(self, chat_id: int, user: JSON, *, creator: bool = False) -> None:
        """Make `user` an administrator (or the creator) of the group `chat_id`."""
        status = "creator" if creator else "administrator"
        self._admins.setdefault(chat_id, {})[int(user["id"])] = (copy.deepcopy(user), status)

    def demote(self, chat_id: int, user_id: int) -> None:
        self._admins.get(chat_id, {}).pop(user_id, None)

    # -- Bot API methods -----------------------------------------------------------------------

    async def _get_chat_administrators(self, params: JSON) -> list[JSON]:
        chat = self._resolve_chat(params)
        if chat["type"] == "private":
            raise ApiError(400, NO_ADMINS_IN_PRIVATE)
        found = self._admins.get(int(chat["id"]), {})
        return [_member(user, status) for user, status in found.values()]

    async def _get_chat_member(self, params: JSON) -> JSON:
        chat = self._resolve_chat(params)
        user_id = params.get("user_id")
        if not isinstance(user_id, int):
            raise ApiError(400, "Bad Request: invalid user_id specified")
        known = self._admins.get(int(chat["id"]), {}).get(user_id)
        if known is not None:
            return _member(*known)
        return _member({"id": user_id, "is_bot": False, "first_name": f"User {user_id}"}, "member")


def _member(user: JSON, status: str) -> JSON:
    entry: JSON = {"status": status, "user": copy.deepcopy(user)}
    if status == "creator":
        entry["is_anonymous"] = False
    elif status == "administrator":
        entry.update(_ADMIN_RIGHTS)
    return entry
