"""The installed distribution's version, read once from its metadata (pyproject.toml)."""

from __future__ import annotations

from importlib.metadata import version

__version__ = version("notifier")
