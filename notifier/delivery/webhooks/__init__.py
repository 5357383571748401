"""Webhooks: events delivered to the app's endpoints under leases, apart from email."""
