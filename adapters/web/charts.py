"""Charts drawn on the server as SVG: readable without JavaScript, scaled by the browser, and
described for screen readers (a title, and the table behind them on the same page)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from markupsafe import Markup, escape

WIDTH: Final = 720
HEIGHT: Final = 240
LEFT: Final = 64  # room for the value axis
BOTTOM: Final = 28  # room for the day labels
TOP: Final = 12
# Distinguishable for the common colour blindnesses (Okabe & Ito's palette).
PALETTE: Final = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00")


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    values: Sequence[float]


def _nice_top(value: float) -> float:
    """The least 1, 2 or 5 times a power of ten at or above `value`: an axis that reads well."""
    if value <= 0:
        return 1.0
    step = 1.0
    while step * 10 <= value:
        step *= 10
    while step > value:
        step /= 10
    for factor in (1, 2, 5, 10):
        if step * factor >= value:
            return step * factor
    return step * 10


def _short(value: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


def _frame(title: str, labels: Sequence[str], top: float) -> list[str]:
    plot_h = HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'xmlns="http://www.w3.org/2000/svg" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
    ]
    for i in range(5):
        y = TOP + plot_h * i / 4
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH}" y1="{y:.1f}" y2="{y:.1f}" stroke="#d0d7de"/>')
        value = top * (4 - i) / 4
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="#4a5561">{escape(_short(value))}</text>'
        )
    step = max(1, len(labels) // 7)
    slot = (WIDTH - LEFT) / max(1, len(labels))
    for i, label in enumerate(labels):
        if i % step == 0:
            x = LEFT + slot * (i + 0.5)
            parts.append(
                f'<text x="{x:.1f}" y="{HEIGHT - 8}" text-anchor="middle" font-size="11" '
                f'fill="#4a5561">{escape(label)}</text>'
            )
    return parts


def _legend(series: Sequence[Series]) -> str:
    items = "".join(
        f'<li><svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" '
        f'fill="{PALETTE[i % len(PALETTE)]}"/></svg> {escape(s.name)}</li>'
        for i, s in enumerate(series)
    )
    return f'<ul class="legend">{items}</ul>'


def stacked_bars(title: str, labels: Sequence[str], series: Sequence[Series]) -> Markup:
    """One bar per label, its parts stacked in the order of `series`."""
    totals = [sum(s.values[i] for s in series) for i in range(len(labels))]
    top = _nice_top(max(totals, default=0))
    parts = _frame(title, labels, top)
    plot_h = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT) / max(1, len(labels))
    for i, label in enumerate(labels):
        base = float(HEIGHT - BOTTOM)
        for n, s in enumerate(series):
            value = s.values[i]
            if value <= 0:
                continue
            h = plot_h * value / top
            base -= h
            parts.append(
                f'<rect x="{LEFT + slot * i + slot * 0.15:.1f}" y="{base:.1f}" '
                f'width="{slot * 0.7:.1f}" height="{h:.1f}" fill="{PALETTE[n % len(PALETTE)]}">'
                f"<title>{escape(label)} {escape(s.name)}: {value:,.0f}</title></rect>"
            )
    parts.append("</svg>")
    return Markup("".join(parts) + _legend(series))


def lines(title: str, labels: Sequence[str], series: Sequence[Series]) -> Markup:
    """One line per series; a day without a value (0) leaves a gap."""
    top = _nice_top(max((v for s in series for v in s.values), default=0))
    parts = _frame(title, labels, top)
    plot_h = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT) / max(1, len(labels))
    for n, s in enumerate(series):
        colour = PALETTE[n % len(PALETTE)]
        points = [
            (LEFT + slot * (i + 0.5), HEIGHT - BOTTOM - plot_h * v / top)
            for i, v in enumerate(s.values)
            if v > 0
        ]
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        for x, y in points:
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
    parts.append("</svg>")
    return Markup("".join(parts) + _legend(series))
