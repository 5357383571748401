"""Shared fixtures that need more than a database (registered from tests/conftest.py)."""
