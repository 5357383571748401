"""Stacked bar charts as inline SVG, drawn on the server: no script, no library, no request.

Only the bars are SVG, stretched to the chart's box; the axis labels are HTML beside it, so
text stays sharp and readable at any width. Colours come from the stylesheet through one
class per series, so both colour schemes apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

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


def stacked_bars(
    bars: Sequence[Bar], series: Sequence[tuple[str, str]], description: str, ticks: Sequence[str]
) -> str:
    """A figure of `bars` with `series` ((css class, legend label), bottom first), its
    `description` as the accessible name and caption, and `ticks` spread along the bottom."""
    top = axis_top(max((sum(b.values) for b in bars), default=0))
    slots = max(len(bars), 1)
    drawn = "".join(_bar(i, bar, series, top) for i, bar in enumerate(bars))
    grid = "".join(
        f'<line class=grid x1=0 x2="{slots}" y1="{y}" y2="{y}" vector-effect="non-scaling-stroke"/>'
        for y in (0, 50, 100)
    )
    legend = "".join(
        f"<li><span class='swatch {escape(css)}' aria-hidden=true></span>{escape(label)}</li>"
        for css, label in series
    )
    return (
        f"<figure class=chart><figcaption>{escape(description)}</figcaption>"
        "<div class=chart-body><div class=y-axis aria-hidden=true>"
        f"<span>{top}</span><span>{top / 2:g}</span><span>0</span></div>"
        f'<svg class=bars viewBox="0 0 {slots} 100" preserveAspectRatio=none role=img '
        f'aria-label="{escape(description)}">{grid}{drawn}</svg></div>'
        "<div class=x-axis aria-hidden=true>"
        + "".join(f"<span>{escape(t)}</span>" for t in ticks)
        + f"</div><ul class=legend>{legend}</ul></figure>"
    )


def _bar(index: int, bar: Bar, series: Sequence[tuple[str, str]], top: int) -> str:
    parts = []
    base = 100.0
    for (css, _), value in zip(series, bar.values, strict=True):
        if value <= 0:
            continue
        height = 100.0 * value / top
        base -= height
        parts.append(
            f'<rect class="{escape(css)}" x="{index + _GAP / 2:g}" y="{base:.3f}" '
            f'width="{1 - _GAP:g}" height="{height:.3f}"/>'
        )
    if not parts:
        return ""
    return f"<g><title>{escape(bar.label)}</title>{''.join(parts)}</g>"
