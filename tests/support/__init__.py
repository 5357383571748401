"""Helpers shared by the test tiers: real databases and a real SMTP server."""
