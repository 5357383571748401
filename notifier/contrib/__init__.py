"""Integrations with application frameworks."""
