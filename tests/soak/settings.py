"""What one soak run does: its size, its pace, its faults, and the product settings it runs."""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass

from tests.soak.topology import TopologyName
from tests.support.smtp_server import Dealt, Fault

# The secret every process of a run shares, made for the run as an operator would make one.
TOKEN_SECRET = secrets.token_urlsafe(32)
PUBLIC_URL = "http://127.0.0.1:9/soak"
MAIL_FROM = "noreply@soak.example.com"
# Recipients: one distinct address (and user) per verification.
RECIPIENT_DOMAIN = "soak.example.com"

# About 10% 4xx, 2% 5xx, 2% dropped after the body (kept: the unknown-outcome case) and 1%
# answered slower than the lease, per transaction.
DEFAULT_SMTP_FAULTS: dict[Dealt, float] = {
    Fault.RCPT_4XX: 0.05,
    Fault.DATA_4XX: 0.05,
    Fault.RCPT_5XX: 0.01,
    Fault.DATA_5XX: 0.01,
    Fault.DROP_AFTER_DATA: 0.02,
    Fault.SLOW_REPLY: 0.01,
}


@dataclass(frozen=True, slots=True)
class SoakSettings:
    """One run's parameters. Times are seconds; every phase is bounded by one of them."""

    count: int = 5000
    workers: int = 3
    seed: int = 1
    # Requests per second through the API, and how many may be in flight at once.
    rate: float = 40.0
    request_concurrency: int = 16
    # Cap on the load-and-fault phase; requests not accepted by then are a violation.
    duration: float = 900.0
    # After faults stop, every row must be terminal within this.
    drain_timeout: float = 120.0
    # Where PostgreSQL runs (tests/soak/topology.py): single (the embedded server,
    # restarted once), failover (primary and streaming replica, failed over once instead of
    # the restart) or pgbouncer (pools through PgBouncer, restarted once behind it).
    topology: TopologyName = "single"

    # Faults: a SIGKILL every kill_every seconds (uniformly drawn), a SIGTERM every
    # term_every, a LISTEN connection terminated every listen_kill_every, and one
    # PostgreSQL restart (or failover) once this fraction of the requests has been accepted.
    kill_every: tuple[float, float] = (2.0, 5.0)
    term_every: tuple[float, float] = (8.0, 15.0)
    listen_kill_every: tuple[float, float] = (3.0, 8.0)
    # And a SIGSTOP every stall_every, held for stall_seconds (longer than the lease) before
    # SIGCONT: the stalled worker's leases expire and are taken over while it still runs.
    # 0 turns stalls off.
    stall_every: tuple[float, float] = (10.0, 20.0)
    stall_seconds: float = 6.0
    pg_restart_at: float = 0.5
    smtp_faults: dict[Dealt, float] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_SMTP_FAULTS)
    )

    # The product's settings. The lease is short so expired leases happen and recover fast;
    # a slow reply outlasts the lease (the keeper must renew it) but not the data timeout.
    lease_seconds: float = 4.0
    slow_reply_seconds: float = 6.0
    data_timeout: float = 15.0
    sweep_interval: float = 1.0
    retry_base: float = 0.2
    retry_factor: float = 2.0
    retry_ceiling: float = 2.0
    max_attempts: int = 5
    unknown_outcome_limit: int = 3
    shutdown_grace: float = 2.0
    listener_check_interval: float = 2.0
    listener_check_timeout: float = 2.0

    @classmethod
    def quick(cls, **overrides: object) -> SoakSettings:
        """CI's version: about 300 verifications, done in under two minutes."""
        base = cls(count=300, rate=10.0, duration=90.0, drain_timeout=45.0)
        return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]

    def worker_env(self, database: dict[str, str], smtp_port: int) -> dict[str, str]:
        return {
            **self.common_env(database),
            "NOTIFIER_SMTP_HOST": "127.0.0.1",
            "NOTIFIER_SMTP_PORT": str(smtp_port),
            "NOTIFIER_SMTP_TLS": "none",
            "NOTIFIER_SMTP_CONNECT_TIMEOUT": "5",
            "NOTIFIER_SMTP_COMMAND_TIMEOUT": "5",
            "NOTIFIER_SMTP_DATA_TIMEOUT": f"{self.data_timeout:g}",
            "NOTIFIER_LEASE_SECONDS": f"{self.lease_seconds:g}",
            "NOTIFIER_SWEEP_INTERVAL": f"{self.sweep_interval:g}",
            "NOTIFIER_RETRY_BASE": f"{self.retry_base:g}",
            "NOTIFIER_RETRY_FACTOR": f"{self.retry_factor:g}",
            "NOTIFIER_RETRY_CEILING": f"{self.retry_ceiling:g}",
            "NOTIFIER_UNKNOWN_OUTCOME_LIMIT": str(self.unknown_outcome_limit),
            "NOTIFIER_SHUTDOWN_GRACE": f"{self.shutdown_grace:g}",
            "NOTIFIER_LISTENER_CHECK_INTERVAL": f"{self.listener_check_interval:g}",
            "NOTIFIER_LISTENER_CHECK_TIMEOUT": f"{self.listener_check_timeout:g}",
        }

    def api_env(self, database: dict[str, str], port: int, public_port: int) -> dict[str, str]:
        return {
            **self.common_env(database),
            "NOTIFIER_API_HOST": "127.0.0.1",
            "NOTIFIER_API_PORT": str(port),
            "NOTIFIER_PUBLIC_HOST": "127.0.0.1",
            "NOTIFIER_PUBLIC_PORT": str(public_port),
        }

    def common_env(self, database: dict[str, str]) -> dict[str, str]:
        """`database`: NOTIFIER_DATABASE_URL and its companions, from the topology."""
        return {
            **database,
            "NOTIFIER_TOKEN_SECRET": TOKEN_SECRET,
            "NOTIFIER_PUBLIC_URL": PUBLIC_URL,
            "NOTIFIER_MAIL_FROM": MAIL_FROM,
            "NOTIFIER_MAX_ATTEMPTS": str(self.max_attempts),
            # Every verification has its own user and address, all in one domain, from one
            # client; throttling is not under test (0: no limit).
            "NOTIFIER_RESEND_LIMIT": "1000000",
            "NOTIFIER_DOMAIN_LIMIT": "0",
            "NOTIFIER_CLIENT_LIMIT": "0",
            "NOTIFIER_GLOBAL_LIMIT": "0",
        }
