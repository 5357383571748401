"""Checks of how a page looks, measured in the browser: text contrast and horizontal fit."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Frame, Page

# WCAG 2.1 AA: 4.5:1 for text, 3:1 for large text (24 px, or 18.66 px bold).
_CONTRAST = (Path(__file__).parent / "contrast.js").read_text()

_OVERFLOW = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"


async def low_contrast(page: Page | Frame) -> list[str]:
    """Every visible text element whose colour on its background is below WCAG AA."""
    failures: list[str] = await page.evaluate(_CONTRAST)
    return failures


async def horizontal_overflow(page: Page | Frame) -> int:
    """How many pixels the page is wider than the viewport (0: it fits)."""
    overflow: int = await page.evaluate(_OVERFLOW)
    return overflow
