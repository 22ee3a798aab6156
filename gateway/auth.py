"""Who may do what: one rule, used by commands, prompts and every HTTP route.

- An **admin** is listed in `AGENVOY_ADMINS` as `platform:sender id`, or was vouched for by
  its platform (a Discord member holding the admin role).
- The **requester** of a task is the sender who started it (same platform, same sender id).
  A terminal task belongs to the window that started it: the same person in another window
  watches it but does not hold it. One sent from the command line has no window: every
  window of its user holds it.
- A **shared chat** (`dc-*`, `tg-*`) is used by many people, so what changes the agent for
  everyone there (model, persona, reasoning, tools that run unasked, reset, deleting it) is for
  admins. Private sessions (`cli-*`, `chat-*`, `temp-*`) belong to whoever uses them.

Every command and every HTTP route names one `Access`; `Authority.require_shared_admin` and
`require_requester` are the two checks behind them.
"""

from __future__ import annotations

from enum import StrEnum

from gateway.events import Origin
from gateway.ownership import is_shared


class Access(StrEnum):
    """Who may run a command."""

    anyone = "anyone"
    requester = "requester"  # the requester of the task it acts on, or an admin
    shared_admin = "shared_admin"  # anyone in a private session; only admins in shared chats


class NotAllowed(PermissionError):
    """The caller may not do this; the message says who may."""

    code = "not_allowed"


def display(origin: Origin, fallback: str = "the requester") -> str:
    return origin.sender_name or origin.sender_id or fallback


class Authority:
    def __init__(self, admins: frozenset[str]) -> None:
        self.admins = admins

    def is_admin(self, who: Origin) -> bool:
        return who.is_admin or who.sender_key in self.admins

    @staticmethod
    def is_requester(who: Origin, started_by: Origin) -> bool:
        same = who.platform == started_by.platform and who.sender_id == started_by.sender_id
        if same and started_by.platform == "terminal" and started_by.window_hash:
            return who.window_hash == started_by.window_hash
        return same  # a task from the command line (`agenvoy send`) has no window to hold it

    def may_act_for(self, who: Origin, started_by: Origin) -> bool:
        """Answer a task's prompt, cancel it: its requester or an admin."""
        return self.is_admin(who) or self.is_requester(who, started_by)

    def may_configure(self, who: Origin, session_id: str) -> bool:
        return not is_shared(session_id) or self.is_admin(who)

    def require_requester(self, who: Origin, started_by: Origin, action: str) -> None:
        """Raise NotAllowed unless `who` may `action` ("answer this prompt") for `started_by`."""
        if self.may_act_for(who, started_by):
            return
        holder = display(started_by)
        if started_by.platform == "terminal":
            holder = f"the terminal window of {holder}"
        raise NotAllowed(f"only {holder} or an admin may {action}")

    def require_configure(self, who: Origin, session_id: str, what: str) -> None:
        """Raise NotAllowed unless `who` may change `what` ("the model") of the session."""
        self.require_shared_admin(who, session_id, f"change {what} of")

    def require_shared_admin(self, who: Origin, session_id: str, action: str) -> None:
        """Raise NotAllowed unless `who` may `action` ("delete") the session: anyone in a
        private session, only an admin in a shared chat."""
        if not self.may_configure(who, session_id):
            raise NotAllowed(f"only an admin may {action} a shared chat")
