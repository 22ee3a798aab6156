"""The price table (`AGENVOY_PRICES`): what a model's tokens cost, so usage can be counted in
money and held against the `cost_day`/`cost_month` budgets.

A TOML or JSON file mapping a model name — or a glob (`claude-sonnet-*`) — to US dollars per
million tokens of `input`, `output`, `cache_read` and `cache_write` (each optional, 0 when
left out). An exact name wins; otherwise the first glob that matches, in the file's order.
It is read and checked once, at start: a bad entry stops the gateway with an error naming it.

A call's cost is computed when its usage row is written and kept on the row, so a later change
of prices never rewrites what was spent. A model the table does not name costs 0: the call is
counted (`model_calls_unpriced` in /metrics) and warned about once per model, rather than
refused — a reply the member already waited for is not thrown away for a missing price.
"""

from __future__ import annotations

import fnmatch
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from gateway.logs import get_logger
from gateway.store.usage import UsageRecord

log = get_logger(__name__)

PER = 1_000_000  # prices are per million tokens
KINDS = ("input", "output", "cache_read", "cache_write")
GLOB_CHARS = frozenset("*?[")
# Agents whose usage rows keep cache reads outside `input` (Anthropic's accounting); the
# others' `input` holds them, as OpenAI's `prompt_tokens` does.
READS_APART = frozenset({"claude", "claude-code"})


class PriceTableError(ValueError):
    """The price table cannot be used; the message names the file and the entry."""


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0

    def cost(self, record: UsageRecord, *, reads_in_input: bool = True) -> float:
        """What one call cost: cache reads and writes at their own prices, the rest of the
        input at the input price."""
        fresh = record.input - record.cache_write - (record.cache_read if reads_in_input else 0)
        return (
            max(0, fresh) * self.input
            + record.output * self.output
            + record.cache_read * self.cache_read
            + record.cache_write * self.cache_write
        ) / PER


def _price(where: str, name: str, entry: object) -> Price:
    if not isinstance(entry, Mapping):
        raise PriceTableError(f"{where}: entry {name!r} must be a table of prices, got {entry!r}")
    unknown = sorted(set(map(str, entry)) - set(KINDS))
    if unknown:
        raise PriceTableError(
            f"{where}: entry {name!r} has unknown key(s) {', '.join(unknown)}; "
            f"expected {', '.join(KINDS)} (US dollars per million tokens)"
        )
    values: dict[str, float] = {}
    for kind, value in entry.items():
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value < 0:
            raise PriceTableError(
                f"{where}: entry {name!r}: {kind} must be a number of dollars ≥ 0, got {value!r}"
            )
        values[str(kind)] = float(value)
    return Price(**values)


class PriceTable:
    def __init__(self, prices: Mapping[str, Price], source: str = "") -> None:
        self.source = source
        self._exact = {n: p for n, p in prices.items() if not GLOB_CHARS & set(n)}
        self._globs = [(n, p) for n, p in prices.items() if GLOB_CHARS & set(n)]
        self._warned: set[str] = set()

    def of(self, model: str) -> Price | None:
        found = self._exact.get(model)
        if found is not None:
            return found
        return next((p for glob, p in self._globs if fnmatch.fnmatchcase(model, glob)), None)

    def priced(
        self, record: UsageRecord, counters: dict[str, int], *, reads_in_input: bool = True
    ) -> UsageRecord:
        """`record` with its cost; an unknown model costs 0, counted and warned about once."""
        price = self.of(record.model)
        if price is None:
            counters["model_calls_unpriced"] = counters.get("model_calls_unpriced", 0) + 1
            if record.model not in self._warned:
                self._warned.add(record.model)
                log.warning(
                    "model not in the price table; its calls cost 0",
                    model=record.model,
                    prices=self.source,
                )
            return replace(record, cost=0.0)
        return replace(record, cost=price.cost(record, reads_in_input=reads_in_input))


def parse_prices(text: str, where: str) -> PriceTable:
    """The table in `text` (TOML, or JSON when `where` ends in .json)."""
    try:
        raw: object = json.loads(text) if where.endswith(".json") else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if where.endswith(".json") else "TOML"
        raise PriceTableError(f"{where}: not valid {kind}: {exc}") from None
    if not isinstance(raw, dict):
        raise PriceTableError(f"{where}: expected a table of model → prices")
    prices = {str(name): _price(where, str(name), entry) for name, entry in raw.items()}
    if not prices:
        raise PriceTableError(f"{where}: names no model")
    return PriceTable(prices, where)


def load_prices(path: Path) -> PriceTable:
    """Read and check the price table at `path` (blocking: call at start, off the loop)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise PriceTableError(f"cannot read the price table {path}: {reason}") from None
    return parse_prices(text, str(path))
