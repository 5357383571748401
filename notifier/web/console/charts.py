"""Stacked bar charts as inline SVG, drawn on the server: no script, no library, no request.
The geometry is computed here; the markup is templates/console/chart.html.

Only the bars are SVG, stretched to the chart's box; the axis labels are HTML beside it, so
text stays sharp and readable at any width. Colours come from the stylesheet through one
class per series, so both colour schemes apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from notifier.web.templating import render

# Room between neighbouring bars, as a share of each bar's slot.
_GAP = 0.2
# Steps the value axis may end at (times a power of ten): 1, 2, 5, 10, 20, 50, ...
_STEPS = (1, 2, 5)


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: a tooltip, and one value per series, stacked from the bottom."""

    label: str
    values: tuple[int, ...]


def axis_top(largest: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten that is at least `largest` (at least 1)."""
    scale = 1
    while True:
        for step in _STEPS:
            if step * scale >= largest:
                return step * scale
        scale *= 10


@dataclass(frozen=True, slots=True)
class _Rect:
    """One series' part of a bar, in the chart's coordinates (slots wide, 100 high)."""

    css: str
    x: str
    y: str
    width: str
    height: str


@dataclass(frozen=True, slots=True)
class _Drawn:
    label: str
    rects: tuple[_Rect, ...]


def stacked_bars(
    bars: Sequence[Bar], series: Sequence[tuple[str, str]], description: str, ticks: Sequence[str]
) -> Markup:
    """A figure of `bars` with `series` ((css class, legend label), bottom first), its
    `description` as the accessible name and caption, and `ticks` spread along the bottom."""
    top = axis_top(max((sum(b.values) for b in bars), default=0))
    drawn = [d for d in (_bar(i, bar, series, top) for i, bar in enumerate(bars)) if d.rects]
    return Markup(
        render(
            "console/chart.html",
            description=description,
            top=top,
            half=f"{top / 2:g}",
            slots=max(len(bars), 1),
            bars=drawn,
            ticks=ticks,
            series=series,
        )
    )


def _bar(index: int, bar: Bar, series: Sequence[tuple[str, str]], top: int) -> _Drawn:
    rects = []
    base = 100.0
    for (css, _), value in zip(series, bar.values, strict=True):
        if value <= 0:
            continue
        height = 100.0 * value / top
        base -= height
        rects.append(
            _Rect(css, f"{index + _GAP / 2:g}", f"{base:.3f}", f"{1 - _GAP:g}", f"{height:.3f}")
        )
    return _Drawn(bar.label, tuple(rects))
