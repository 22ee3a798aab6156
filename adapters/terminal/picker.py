"""The session picker: sessions grouped by prefix, the current one first."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static, TabbedContent, TabPane
from textual.widgets.option_list import Option

from adapters.http_client import GatewayError, GatewayUnavailable
from adapters.terminal.plain import line
from adapters.terminal.recent import PREVIEW_SHOWN, preview

PREFIX_ORDER = ("cli", "chat", "dc", "tg", "temp")

# A session's latest n messages, oldest first (GatewayClient.history).
Messages = Callable[[str, int], Awaitable[list[dict[str, Any]]]]


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    name: str
    updated_at: int  # Unix ms
    running: bool
    parent: str = ""  # the session whose task started this subagent session

    @property
    def prefix(self) -> str:
        return self.session_id.split("-", 1)[0]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionRow:
        return cls(
            session_id=str(data["session_id"]),
            name=str(data.get("name") or ""),
            updated_at=int(data.get("updated_at") or 0),
            running=bool(data.get("running")),
            parent=str(data.get("parent") or ""),
        )


def short_id(session_id: str) -> str:
    """`cli-` + 8 characters of a minted id; platform ids are short enough as they are."""
    prefix, _, rest = session_id.partition("-")
    if prefix in ("cli", "chat", "temp") and len(rest) > 8:
        return f"{prefix}-{rest[:8]}"
    return session_id if len(session_id) <= 24 else session_id[:23] + "…"


def when(ms: int, now: datetime | None = None) -> str:
    if ms <= 0:
        return "never"
    moment = datetime.fromtimestamp(ms / 1000).astimezone()
    today = (now or datetime.now().astimezone()).date()
    return moment.strftime("%H:%M") if moment.date() == today else moment.strftime("%Y-%m-%d")


def ordered(rows: Sequence[SessionRow], current: str) -> list[SessionRow]:
    """The current session first, then the most recently active; a subagent's session right
    under the session that started it, when that one is listed."""
    listed = {r.session_id for r in rows}
    order = sorted(rows, key=lambda r: (r.session_id != current, -r.updated_at, r.session_id))
    children: dict[str, list[SessionRow]] = {}
    for row in order:
        if row.parent in listed and row.session_id != current:
            children.setdefault(row.parent, []).append(row)
    placed = {c.session_id for group in children.values() for c in group}

    def family(row: SessionRow) -> list[SessionRow]:
        return [row, *(d for c in children.get(row.session_id, ()) for d in family(c))]

    return [r for row in order if row.session_id not in placed for r in family(row)]


def visible_groups(rows: Sequence[SessionRow]) -> list[str]:
    present = {r.prefix for r in rows}
    known = [p for p in PREFIX_ORDER if p in present]
    return known + sorted(present - set(known))


class SessionPicker(ModalScreen[str | None]):
    """Dismissed with the chosen session id, or None."""

    DEFAULT_CSS = """
    #picker-preview { dock: bottom; height: 7; color: $text-muted; border-top: solid $secondary; }
    """
    BINDINGS = [
        Binding("escape", "dismiss_picker", "Close"),
        Binding("t", "toggle_temp", "Show temp-*"),
    ]

    def __init__(
        self,
        sessions: Sequence[SessionRow],
        current: str,
        messages: Messages | None = None,
        show_temp: bool = False,
    ):
        """`messages(session_id, n)`: a session's latest n messages, for the preview."""
        super().__init__()
        self.sessions = list(sessions)
        self.current = current
        self.messages = messages
        self.show_temp = show_temp

    @property
    def rows(self) -> list[SessionRow]:
        shown = [
            r
            for r in self.sessions
            if self.show_temp or r.prefix != "temp" or r.session_id == self.current or r.parent
        ]
        return ordered(shown, self.current)

    def compose(self) -> ComposeResult:
        rows = self.rows
        groups = visible_groups(rows)
        hint = "Enter: open · t: " + ("hide" if self.show_temp else "show") + " temp-* · Esc"
        with Vertical(id="picker"):
            yield Label(f"Sessions ({len(rows)})   {hint}", id="picker-title")
            if len(groups) < 2:
                yield self._list("all", rows)
            else:
                with TabbedContent(id="picker-tabs"):
                    with TabPane("all", id="tab-all"):
                        yield self._list("all", rows)
                    for prefix in groups:
                        with TabPane(prefix, id=f"tab-{prefix}"):
                            yield self._list(prefix, [r for r in rows if r.prefix == prefix])
            if self.messages is not None:
                yield Static("", id="picker-preview")

    def _list(self, group: str, rows: Sequence[SessionRow]) -> OptionList:
        options = [Option(self._label(r), id=r.session_id) for r in rows]
        return OptionList(*options, id=f"list-{group}")

    def _label(self, row: SessionRow) -> Content:
        """A row as text: a session's name is whatever a person or a chat's title made it."""
        mark = "▶" if row.session_id == self.current else " "
        running = "● running" if row.running else ""
        shown = line(row.name)
        name = shown if len(shown) <= 24 else shown[:23] + "…"
        sid = short_id(row.session_id)
        if row.parent:  # shown under the session that started it
            sid = f"↳ {sid}"
        return Content(f"{mark} {sid:<16} {name:<24} {when(row.updated_at):>10}  {running}")

    def on_mount(self) -> None:
        self.query(OptionList).first().focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        pane = event.pane
        if pane is not None:
            pane.query_one(OptionList).focus()

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if self.messages is not None and event.option.id is not None:
            self._preview(event.option.id)

    @work(exclusive=True, group="preview")
    async def _preview(self, session_id: str) -> None:
        """The highlighted session's latest messages, under the list."""
        assert self.messages is not None
        try:
            shown = preview(await self.messages(session_id, PREVIEW_SHOWN))
        except (GatewayUnavailable, GatewayError) as exc:
            shown = f"no preview: {exc}"
        with contextlib.suppress(NoMatches):  # the picker closed meanwhile
            self.query_one("#picker-preview", Static).update(Content(shown))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_dismiss_picker(self) -> None:
        self.dismiss(None)

    def action_toggle_temp(self) -> None:
        self.show_temp = not self.show_temp
        self.refresh(recompose=True)


def find_session(rows: list[SessionRow], wanted: str) -> str | None:
    """By exact name first, then by id, then by a unique id prefix."""
    for row in rows:
        if row.name == wanted:
            return row.session_id
    for row in rows:
        if row.session_id == wanted:
            return row.session_id
    prefixed = [r for r in rows if r.session_id.startswith(wanted)]
    return prefixed[0].session_id if len(prefixed) == 1 else None
