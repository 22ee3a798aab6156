"""Tab completion of `/commands`: the window's own, and the gateway's as its command registry
lists them for the terminal (`GET /v1/commands`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CommandHint:
    name: str  # without the slash
    summary: str
    usage: str = ""

    @property
    def shown(self) -> str:
        return f"/{self.name} {self.usage}".rstrip()


class Completer:
    def __init__(self, window: Iterable[CommandHint] = ()) -> None:
        self._window = {hint.name: hint for hint in window}
        self._gateway: dict[str, CommandHint] = {}

    def learn(self, gateway: Iterable[Mapping[str, object]]) -> None:
        """Take the gateway's commands (as `/v1/commands` lists them)."""
        self._gateway = {
            str(c["name"]): CommandHint(
                str(c["name"]), str(c.get("summary", "")), str(c.get("usage", ""))
            )
            for c in gateway
        }

    def hints(self) -> list[CommandHint]:
        """Every command the window knows, its own first where a name is both."""
        known = dict(self._gateway)
        known.update(self._window)
        return sorted(known.values(), key=lambda hint: hint.name)

    def gateway_hints(self) -> list[CommandHint]:
        """The gateway's commands that the window does not answer itself."""
        return [hint for hint in self.hints() if hint.name not in self._window]

    def complete(self, text: str) -> tuple[str, list[CommandHint]]:
        """`text` completed as far as it is unambiguous, and the commands it could still be.

        Only a lone `/word` is completed; anything else comes back as it is, with no hints."""
        if not text.startswith("/") or any(c.isspace() for c in text):
            return text, []
        matches = [hint for hint in self.hints() if hint.name.startswith(text[1:].lower())]
        if len(matches) == 1:
            return f"/{matches[0].name} ", matches
        if not matches:
            return text, []
        common = _common_prefix([hint.name for hint in matches])
        return f"/{common}" if len(common) >= len(text) - 1 else text, matches


def _common_prefix(names: list[str]) -> str:
    # The first and last in sorted order differ earliest: their common start is everyone's.
    first, last = min(names), max(names)
    length = 0
    while length < len(first) and first[length] == last[length]:
        length += 1
    return first[:length]
