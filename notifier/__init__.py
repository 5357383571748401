"""notifier: email-verification delivery over a PostgreSQL outbox, woken by LISTEN/NOTIFY."""

__version__ = "0.1.0"
