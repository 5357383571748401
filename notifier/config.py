"""Settings: every NOTIFIER_* environment variable, declared once and read by one function.

Each setting is a field declared with `setting(...)` (notifier.settings_spec): its variable,
parser, default, unit and meaning side by side. `Group.from_env()` reads a group through
`settings_spec.load`, the one place the environment is read. An invalid value raises
ConfigError naming the variable, the value and what is expected, so the process stops at
start with a clear message. `GROUPS` lists every group, for `--help` and the docs test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from notifier import settings_values as parse
from notifier import tokens
from notifier.errors import ConfigError
from notifier.mailbox_providers import SHARED_DOMAINS
from notifier.outcomes import Method
from notifier.return_urls import ReturnUrls
from notifier.settings_spec import Env, load, setting

G = TypeVar("G", bound="Group")

DEFAULT_DATA_DIR = Path(".notifier")
DEFAULT_PRODUCT_NAME = "notifier"
DAY = 86400.0


class Group:
    """A group of settings one part of notifier reads together."""

    __slots__ = ()

    @classmethod
    def from_env(cls: type[G], env: Env | None = None) -> G:
        return load(cls, env)


# -- the groups --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DatabaseSettings(Group):
    """Where the database is: a server URL, or an embedded server in a data directory."""

    url: str | None = setting(
        "NOTIFIER_DATABASE_URL",
        parse.database_url,
        None,
        "A postgresql:// URL (several hosts and target_session_attrs=read-write for "
        "failover). Unset: an embedded PostgreSQL in NOTIFIER_DATA_DIR.",
        default_text="unset (embedded)",
    )
    data_dir: Path = setting(
        "NOTIFIER_DATA_DIR",
        Path,
        DEFAULT_DATA_DIR,
        "The directory of the embedded server and of `notifier dev`'s secret, key and inbox.",
    )
    listen_url: str | None = setting(
        "NOTIFIER_LISTEN_DATABASE_URL",
        parse.database_url,
        None,
        "Where the workers' LISTEN connections and `notifier migrate` go (a session of their "
        "own); lets the pools go through a transaction-mode pooler.",
        default_text="NOTIFIER_DATABASE_URL",
    )
    statement_cache_size: int = setting(
        "NOTIFIER_STATEMENT_CACHE_SIZE",
        parse.integer(0, 10_000),
        100,
        "Prepared statements each pooled connection keeps; 0 behind PgBouncer in "
        "transaction or statement mode (before 1.21).",
    )

    def check(self) -> None:
        if self.listen_url is not None and self.url is None:
            raise ConfigError(
                "NOTIFIER_LISTEN_DATABASE_URL",
                "needs NOTIFIER_DATABASE_URL too (the embedded server has one address)",
            )

    def listen_url_for(self, url: str) -> str:
        """The LISTEN (and migration) URL, given the URL the pools use."""
        return self.listen_url or url


TlsMode = Literal["none", "starttls", "tls"]


@dataclass(frozen=True, slots=True)
class SmtpSettings(Group):
    """How to reach the mail server, and who the mail is from."""

    host: str = setting("NOTIFIER_SMTP_HOST", parse.text, "localhost", "The mail server.")
    port: int = setting("NOTIFIER_SMTP_PORT", parse.integer(1, 65535), 25, "Its port.")
    username: str | None = setting(
        "NOTIFIER_SMTP_USERNAME", parse.text, None, "AUTH user name; unset: no AUTH."
    )
    password: str | None = setting(
        "NOTIFIER_SMTP_PASSWORD", str, None, "AUTH password.", secret=True
    )
    tls: TlsMode = setting(
        "NOTIFIER_SMTP_TLS",
        parse.choice(TlsMode),
        "none",
        "none (plain), starttls (upgrade, required) or tls (implicit, port 465).",
    )
    validate_certs: bool = setting(
        "NOTIFIER_SMTP_VALIDATE_CERTS",
        parse.boolean,
        True,
        "Verify the server's certificate (turn off only for tests).",
    )
    ca_file: Path | None = setting(
        "NOTIFIER_SMTP_CA_FILE",
        parse.existing_file,
        None,
        "PEM bundle of the authorities to trust (a private relay's CA); unset: the system's.",
    )
    connect_timeout: float = setting(
        "NOTIFIER_SMTP_CONNECT_TIMEOUT",
        parse.seconds(0.1, 600),
        10.0,
        "Time to connect, greet, STARTTLS and AUTH.",
        unit="s",
    )
    command_timeout: float = setting(
        "NOTIFIER_SMTP_COMMAND_TIMEOUT",
        parse.seconds(0.1, 600),
        30.0,
        "Time for each reply before the message body.",
        unit="s",
    )
    data_timeout: float = setting(
        "NOTIFIER_SMTP_DATA_TIMEOUT",
        parse.seconds(0.1, 1200),
        120.0,
        "Time for the reply after the body; a timeout there is an unknown outcome (the "
        "server may have kept the message).",
        unit="s",
    )
    pool_size: int = setting(
        "NOTIFIER_SMTP_POOL_SIZE",
        parse.integer(1, 256),
        8,
        "Connections kept open to the server per worker process.",
    )
    mail_from: str = setting(
        "NOTIFIER_MAIL_FROM",
        parse.address,
        "notifier@localhost",
        "The From address of every message.",
    )
    message_id_domain: str | None = setting(
        "NOTIFIER_MESSAGE_ID_DOMAIN",
        parse.text,
        None,
        "Right-hand side of the stable Message-IDs.",
        default_text="the domain of NOTIFIER_MAIL_FROM",
    )
    bounce_domain: str | None = setting(
        "NOTIFIER_BOUNCE_DOMAIN",
        parse.text,
        None,
        "The domain of each delivery's own return path, bounce+<id>.<MAC>@<domain> (VERP), "
        "whose mail `notifier inbound` takes: reports come back naming their delivery. Its "
        "MX must reach notifier inbound.",
        default_text="unset: the return path is NOTIFIER_MAIL_FROM",
    )

    @property
    def id_domain(self) -> str:
        return self.message_id_domain or self.mail_from.rpartition("@")[2]


@dataclass(frozen=True, slots=True)
class MessageSettings(Group):
    """What the verification email calls the product, whose name it comes from, and where
    its template overrides are."""

    product_name: str = setting(
        "NOTIFIER_PRODUCT_NAME",
        parse.display_name,
        DEFAULT_PRODUCT_NAME,
        "The product the email names (subject, heading, footer), and the pages its link opens.",
    )
    mail_from_name: str | None = setting(
        "NOTIFIER_MAIL_FROM_NAME",
        parse.display_name,
        None,
        'The display name in the From header ("Acme" <noreply@...>).',
        default_text="NOTIFIER_PRODUCT_NAME",
    )
    template_dir: Path | None = setting(
        "NOTIFIER_TEMPLATE_DIR",
        Path,
        None,
        "A directory of template overrides (the email's, and pages.toml for the link pages' "
        "words): files at its top replace the English ones, files in <locale>/ those of that "
        "language.",
    )

    @property
    def sender_name(self) -> str:
        return self.mail_from_name or self.product_name


Mode = Literal["notify", "poll"]
TransportKind = Literal["smtp", "null"]


@dataclass(frozen=True, slots=True)
class WorkerSettings(Group):
    """How a worker finds, claims, retries and lets go of deliveries."""

    mode: Mode = setting(
        "NOTIFIER_MODE",
        parse.choice(Mode),
        "notify",
        "notify (LISTEN, plus a slow sweep) or poll (no LISTEN).",
    )
    poll_interval: float = setting(
        "NOTIFIER_POLL_INTERVAL",
        parse.seconds(0.001, 3600),
        1.0,
        "Time between polls in poll mode.",
        unit="s",
    )
    sweep_interval: float = setting(
        "NOTIFIER_SWEEP_INTERVAL",
        parse.seconds(0.01, 3600),
        10.0,
        "Time between fallback sweeps in notify mode (jittered by a tenth).",
        unit="s",
    )
    lease_seconds: float = setting(
        "NOTIFIER_LEASE_SECONDS",
        parse.seconds(1, 3600),
        60.0,
        "How long a claim owns a row without renewal; renewed every third of it while a send "
        "is in flight. A crashed worker's rows return after this long.",
        unit="s",
    )
    concurrency: int = setting(
        "NOTIFIER_CONCURRENCY",
        parse.integer(1, 1024),
        8,
        "Sends in flight per worker process; keep it equal to NOTIFIER_SMTP_POOL_SIZE, or "
        "claims wait for a connection.",
    )
    domain_concurrency: int | None = setting(
        "NOTIFIER_DOMAIN_CONCURRENCY",
        parse.integer(1, 1024),
        None,
        "The most sends in flight to one recipient domain per worker process. A domain starts "
        "with one and gains half as many again per quick send, halves after a slow one; its "
        "other rows wait holding no slot, so no slow domain holds every send slot.",
        default_text="three quarters of NOTIFIER_CONCURRENCY, at least 1",
    )
    batch_size: int = setting(
        "NOTIFIER_BATCH_SIZE",
        parse.integer(1, 1000),
        100,
        "The most rows one claim, pre-send check or completion takes.",
    )
    retry_base: float = setting(
        "NOTIFIER_RETRY_BASE",
        parse.seconds(0.001, DAY),
        60.0,
        "Retry n waits base * factor^(n-1), jittered, at most the ceiling.",
        unit="s",
    )
    retry_factor: float = setting(
        "NOTIFIER_RETRY_FACTOR", parse.float_at_least(1.0), 5.0, "The retry delay's growth factor."
    )
    retry_ceiling: float = setting(
        "NOTIFIER_RETRY_CEILING",
        parse.seconds(0.001, 7 * DAY),
        900.0,
        "The longest retry delay.",
        unit="s",
    )
    retry_jitter: float = setting(
        "NOTIFIER_RETRY_JITTER",
        parse.fraction,
        0.2,
        "The fraction by which a retry delay is randomly shortened or lengthened.",
    )
    send_rate: float | None = setting(
        "NOTIFIER_SEND_RATE",
        parse.float_at_least(0.1),
        None,
        "Messages a second across every worker, from one token bucket in the database that "
        "each draws from before it claims; it halves when the provider throttles and grows "
        "back by a twentieth a second. Set it a little under the provider's limit.",
        unit="messages/s",
        default_text="unset: no limit",
    )
    daily_quota: int | None = setting(
        "NOTIFIER_DAILY_QUOTA",
        parse.integer(1, 10**9),
        None,
        "Messages a UTC day across every worker (the provider's daily quota), counted in the "
        "same database row as NOTIFIER_SEND_RATE; past it no worker claims until midnight UTC.",
        unit="messages",
        default_text="unset: no quota",
    )
    throttle_base: float = setting(
        "NOTIFIER_THROTTLE_BASE",
        parse.seconds(0.001, 600),
        1.0,
        "After the provider throttles, the first wait; each throttle in a row doubles it, "
        "each send halves it. A throttled try uses up no attempt.",
        unit="s",
    )
    throttle_ceiling: float = setting(
        "NOTIFIER_THROTTLE_CEILING",
        parse.seconds(0.001, 3600),
        30.0,
        "The longest wait after a throttle (the link's expiry still ends the delivery).",
        unit="s",
    )
    unknown_outcome_limit: int = setting(
        "NOTIFIER_UNKNOWN_OUTCOME_LIMIT",
        parse.integer(1, 100),
        3,
        "Unknown outcomes (the connection lost after the body) before a delivery is failed and "
        "flagged rather than sent again.",
    )
    shutdown_grace: float = setting(
        "NOTIFIER_SHUTDOWN_GRACE",
        parse.seconds(0, 3600),
        30.0,
        "Time in-flight sends get to finish after SIGTERM.",
        unit="s",
    )
    listener_check_interval: float = setting(
        "NOTIFIER_LISTENER_CHECK_INTERVAL",
        parse.seconds(0.05, 3600),
        15.0,
        "Time between the LISTEN connection's self-notification round trips.",
        unit="s",
    )
    listener_check_timeout: float = setting(
        "NOTIFIER_LISTENER_CHECK_TIMEOUT",
        parse.seconds(0.05, 600),
        5.0,
        "How long one round trip may take before the listener is replaced.",
        unit="s",
    )
    transport: TransportKind = setting(
        "NOTIFIER_TRANSPORT",
        parse.choice(TransportKind),
        "smtp",
        "smtp, or null (accepts everything at once; for benchmarks).",
    )
    suppression_ttl: float = setting(
        "NOTIFIER_SUPPRESSION_TTL",
        parse.seconds(60, 3650 * DAY),
        30 * DAY,
        "How long a mailbox the recipient's server refused for good stays suppressed.",
        unit="s",
    )

    @property
    def per_domain(self) -> int:
        """The most sends in flight one recipient domain may hold (see domain_concurrency):
        a quarter of the slots stay for other domains unless told otherwise."""
        if self.domain_concurrency is not None:
            return self.domain_concurrency
        return max(1, self.concurrency - max(1, self.concurrency // 4))

    def check(self) -> None:
        """Cross-field rules that single values cannot express."""
        if self.retry_ceiling < self.retry_base:
            raise ConfigError("NOTIFIER_RETRY_CEILING", "must not be below NOTIFIER_RETRY_BASE")


@dataclass(frozen=True, slots=True)
class TokenSettings(Group):
    """The secret that verification tokens are derived from, and how long they live."""

    secrets: tuple[str, ...] = setting(
        "NOTIFIER_TOKEN_SECRET",
        tokens.strong_secret_list,
        (),
        "One or more secrets, comma-separated, newest first, each at least 32 characters of "
        "a generator's output. Removing one revokes the links made with it.",
        secret=True,
        default_text="required (notifier dev makes its own)",
    )
    ttl_seconds: float = setting(
        "NOTIFIER_TOKEN_TTL",
        parse.seconds(60, 30 * DAY),
        3600.0,
        "How long a verification link stays valid (independent of leases).",
        unit="s",
    )
    public_url: str = setting(
        "NOTIFIER_PUBLIC_URL",
        parse.http_url,
        "http://127.0.0.1:8001",
        "Where people reach the public listener (through its reverse proxy); links are "
        "{url}/verify?token=...",
    )

    @classmethod
    def from_env(
        cls, env: Env | None = None, *, required: bool = True, strict: bool = True
    ) -> TokenSettings:
        """The token settings; `strict` (all but `notifier dev`) refuses weak secrets."""
        settings = load(cls, env, parsers=None if strict else {"secrets": tokens.secret_list})
        if required and not settings.secrets:
            raise ConfigError(
                "NOTIFIER_TOKEN_SECRET",
                f"is required: set it to a random string of at least 32 characters; "
                f"{tokens.GENERATE_HINT}",
            )
        return settings


@dataclass(frozen=True, slots=True)
class RequestSettings(Group):
    """Limits on verification requests, and what each new delivery is given. Every limit
    counts canonical mailboxes (lowercased, sub-address tags stripped, IDNA domain)."""

    idempotency_ttl: float = setting(
        "NOTIFIER_IDEMPOTENCY_TTL",
        parse.seconds(60, 30 * DAY),
        DAY,
        "How long an Idempotency-Key is remembered (then reusable).",
        unit="s",
    )
    resend_limit: int = setting(
        "NOTIFIER_RESEND_LIMIT",
        parse.integer(1, 1_000_000),
        5,
        "Requests per user and per mailbox within the window; beyond it, 429.",
    )
    resend_window: float = setting(
        "NOTIFIER_RESEND_WINDOW",
        parse.seconds(1, 30 * DAY),
        3600.0,
        "The window every limit counts requests in.",
        unit="s",
    )
    domain_limit: int = setting(
        "NOTIFIER_DOMAIN_LIMIT",
        parse.integer(0, 10**9),
        1000,
        "Requests per recipient domain per API key per window (0: none); not counted for "
        "the shared providers' domains.",
    )
    shared_domains: frozenset[str] = setting(
        "NOTIFIER_SHARED_MAIL_DOMAINS",
        parse.domains,
        frozenset(SHARED_DOMAINS),
        "Domains of millions of unrelated mailboxes (Gmail, Outlook, ...), comma-separated, "
        "where no domain budget applies: it would refuse that provider's real users.",
        empty=True,
        default_text="the largest consumer providers (notifier.mailbox_providers)",
    )
    client_limit: int = setting(
        "NOTIFIER_CLIENT_LIMIT",
        parse.integer(0, 10**9),
        10_000,
        "Requests per API key per window (0: none).",
    )
    global_limit: int = setting(
        "NOTIFIER_GLOBAL_LIMIT",
        parse.integer(0, 10**9),
        100_000,
        "Requests in all per window (0: none).",
    )
    subaddress_separators: str = setting(
        "NOTIFIER_SUBADDRESS_SEPARATORS",
        parse.separators,
        "+",
        'Characters that start a sub-address tag ("ada+news@" is "ada@"); empty: none.',
        empty=True,
    )
    max_attempts: int = setting(
        "NOTIFIER_MAX_ATTEMPTS",
        parse.integer(1, 100),
        5,
        "Attempts per delivery before it fails (stored on each new delivery).",
    )
    return_urls: ReturnUrls = setting(
        "NOTIFIER_RETURN_URLS",
        ReturnUrls.parse,
        ReturnUrls(),
        "Where a person may be sent back to after Confirm: URL prefixes (scheme, host or "
        "*.domain, port, path), comma-separated; a return_to under none of them is refused "
        "(422). An API key may narrow them (`keys create --return-url`).",
        default_text="none (return_to refused)",
    )


@dataclass(frozen=True, slots=True)
class CodeSettings(Group):
    """How a verification is confirmed unless its request says, and the limits on codes.
    The attacker's budget they give is stated in docs/operations.md ("Codes")."""

    method: Method = setting(
        "NOTIFIER_VERIFY_METHOD",
        parse.choice(Method),
        "link",
        "How a request without `method` is confirmed: link, code (typed into the app) or "
        "link_and_code.",
    )
    digits: int = setting(
        "NOTIFIER_CODE_DIGITS", parse.integer(6, 10), 6, "Digits in a code.", unit="digits"
    )
    ttl_seconds: float = setting(
        "NOTIFIER_CODE_TTL",
        parse.seconds(60, DAY),
        600.0,
        "How long a code stays valid (NIST SP 800-63B: 10 minutes); never longer than its "
        "link. A code-only verification lives this long.",
        unit="s",
    )
    max_failures: int = setting(
        "NOTIFIER_CODE_ATTEMPTS",
        parse.integer(1, 10),
        5,
        "Wrong codes that lock a verification's code (a new request is needed).",
    )
    mailbox_failures: int = setting(
        "NOTIFIER_CODE_MAILBOX_FAILURES",
        parse.integer(1, 10_000),
        20,
        "Wrong codes one mailbox may spend within the failure window, over all its "
        "verifications; a resend or a new request does not reset it.",
    )
    failure_window: float = setting(
        "NOTIFIER_CODE_FAILURE_WINDOW",
        parse.seconds(3600, 7 * DAY),
        DAY,
        "The window NOTIFIER_CODE_MAILBOX_FAILURES counts in.",
        unit="s",
    )


@dataclass(frozen=True, slots=True)
class InboundSettings(Group):
    """`notifier inbound`: the SMTP listener for NOTIFIER_BOUNCE_DOMAIN's reports."""

    host: str = setting(
        "NOTIFIER_INBOUND_HOST", parse.text, "127.0.0.1", "The address it listens on."
    )
    port: int = setting("NOTIFIER_INBOUND_PORT", parse.integer(1, 65535), 2525, "Its port.")
    max_bytes: int = setting(
        "NOTIFIER_INBOUND_MAX_BYTES",
        parse.integer(1024, 10 * 1024 * 1024),
        1024 * 1024,
        "The largest report taken (a DSN with headers only is a few kilobytes).",
        unit="bytes",
    )
    max_connections: int = setting(
        "NOTIFIER_INBOUND_MAX_CONNECTIONS",
        parse.integer(1, 10_000),
        50,
        "Connections open at once; more are told to come back (421).",
    )
    ses_topics: tuple[str, ...] = setting(
        "NOTIFIER_SES_TOPICS",
        parse.topic_arns,
        (),
        "The SNS topics (ARNs, comma-separated) whose Amazon SES bounce and complaint "
        "notifications POST /inbound/ses takes on the public listener; any other topic is "
        "refused before its certificate is fetched.",
        default_text="none: /inbound/ses refuses everything",
    )
    sns_certificate_urls: tuple[str, ...] = setting(
        "NOTIFIER_SNS_CERTIFICATE_URLS",
        parse.url_prefixes,
        (),
        "URL prefixes trusted to serve SNS signing certificates besides Amazon's own "
        "(https://sns.<region>.amazonaws.com/...pem), comma-separated: for a test's loopback "
        "server, never for production.",
        default_text="none: only Amazon's SNS hosts",
    )
    rate: float = setting(
        "NOTIFIER_INBOUND_RATE",
        parse.float_at_least(0.1),
        100.0,
        "Reports a second the listener takes; more are told to come back (451).",
        unit="reports/s",
    )


@dataclass(frozen=True, slots=True)
class ApiSettings(Group):
    """Where the two HTTP listeners listen, and what one client can hold of them."""

    host: str = setting(
        "NOTIFIER_API_HOST",
        parse.text,
        "127.0.0.1",
        "The internal API's address (/v1/*, /metrics, /docs, /console; keys required). "
        "Never public.",
    )
    port: int = setting("NOTIFIER_API_PORT", parse.integer(1, 65535), 8000, "Its port.")
    public_host: str = setting(
        "NOTIFIER_PUBLIC_HOST",
        parse.text,
        "127.0.0.1",
        "The public pages' address (/verify, the JSON confirm): the one to expose, behind a "
        "reverse proxy.",
    )
    public_port: int = setting("NOTIFIER_PUBLIC_PORT", parse.integer(1, 65535), 8001, "Its port.")
    max_body_bytes: int = setting(
        "NOTIFIER_MAX_BODY_BYTES",
        parse.integer(256, 1024 * 1024),
        16 * 1024,
        "Larger request bodies get 413.",
        unit="bytes",
    )
    header_timeout: float = setting(
        "NOTIFIER_HTTP_HEADER_TIMEOUT",
        parse.seconds(0.1, 600),
        10.0,
        "Time a connection gets to send a request's head (from opening, and after each "
        "response); then it is closed.",
        unit="s",
    )
    body_timeout: float = setting(
        "NOTIFIER_HTTP_BODY_TIMEOUT",
        parse.seconds(0.1, 600),
        10.0,
        "Time a client gets to send a whole request body; then 408.",
        unit="s",
    )
    keepalive_timeout: int = setting(
        "NOTIFIER_HTTP_KEEPALIVE_TIMEOUT",
        parse.integer(1, 600),
        5,
        "How long an idle kept-alive connection stays open.",
        unit="s",
    )
    limit_concurrency: int = setting(
        "NOTIFIER_HTTP_LIMIT_CONCURRENCY",
        parse.integer(1, 1_000_000),
        1000,
        "Connections plus requests in progress per listener; beyond it, 503 at once.",
    )
    trace_url_template: str | None = setting(
        "NOTIFIER_TRACE_URL_TEMPLATE",
        parse.trace_url_template,
        None,
        "Where the console links a delivery's trace id, with {trace_id} once in its place "
        "(Jaeger: http://jaeger:16686/trace/{trace_id}). Unset: the trace id without a link.",
        default_text="unset",
    )

    def check(self) -> None:
        if (self.host, self.port) == (self.public_host, self.public_port):
            raise ConfigError(
                "NOTIFIER_PUBLIC_PORT",
                "the public listener needs an address of its own, not the internal API's "
                f"({self.host}:{self.port})",
            )


@dataclass(frozen=True, slots=True)
class RetentionSettings(Group):
    """How long finished deliveries keep their addresses, and their rows."""

    scrub_after: float = setting(
        "NOTIFIER_SCRUB_AFTER",
        parse.seconds(0, 3650 * DAY),
        7 * DAY,
        "Time after a delivery finished (and its link expired) before everything derived "
        "from its address is scrubbed; older expired links cannot be renewed.",
        unit="s",
    )
    retention: float = setting(
        "NOTIFIER_RETENTION",
        parse.seconds(0, 3650 * DAY),
        30 * DAY,
        "Time after a delivery finished before it is deleted.",
        unit="s",
    )
    event_retention: float = setting(
        "NOTIFIER_EVENT_RETENTION",
        parse.seconds(3600, 3650 * DAY),
        7 * DAY,
        "Time events stay in the feed (GET /v1/events) before cleanup deletes them; one "
        "still owed to a webhook endpoint stays until it is delivered or dead.",
        unit="s",
    )
    batch: int = setting(
        "NOTIFIER_CLEANUP_BATCH",
        parse.integer(1, 100_000),
        1000,
        "Rows per cleanup statement, so no delete holds many locks.",
    )
    interval: float = setting(
        "NOTIFIER_CLEANUP_INTERVAL",
        parse.seconds(0, 30 * DAY),
        3600.0,
        "Time between the workers' cleanup runs; 0 turns them off.",
        unit="s",
    )

    def check(self) -> None:
        if self.scrub_after > self.retention:
            raise ConfigError("NOTIFIER_SCRUB_AFTER", "must not exceed NOTIFIER_RETENTION")


@dataclass(frozen=True, slots=True)
class WebhookSettings(Group):
    """How workers deliver events to the app's webhook endpoints (Standard Webhooks)."""

    concurrency: int = setting(
        "NOTIFIER_WEBHOOK_CONCURRENCY",
        parse.integer(1, 1024),
        8,
        "Webhook requests in flight per worker process, apart from its email sends: a slow "
        "receiver never delays an email.",
    )
    endpoint_concurrency: int = setting(
        "NOTIFIER_WEBHOOK_ENDPOINT_CONCURRENCY",
        parse.integer(1, 1024),
        4,
        "Webhook requests in flight to one endpoint across every worker, so one slow or dead "
        "endpoint never holds every webhook slot.",
    )
    timeout: float = setting(
        "NOTIFIER_WEBHOOK_TIMEOUT",
        parse.seconds(0.1, 120),
        15.0,
        "The longest a webhook request may take, connecting to reading the answer; past it, "
        "the outcome is unknown (retried: the receiver may have it).",
        unit="s",
    )
    retry_schedule: tuple[float, ...] = setting(
        "NOTIFIER_WEBHOOK_RETRY_SCHEDULE",
        parse.schedule,
        (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 50400.0, 72000.0, 86400.0),
        "The waits before each retry of a failed webhook (s, m, h or d), about three days in "
        "all; after the last, the delivery is dead (shown in the console, and replayable).",
        default_text="5s,5m,30m,2h,5h,10h,14h,20h,24h",
    )
    disable_after: float = setting(
        "NOTIFIER_WEBHOOK_DISABLE_AFTER",
        parse.seconds(60, 365 * DAY),
        5 * DAY,
        "An endpoint every delivery to which failed for this long is disabled (logged, "
        "counted, shown in the console) until `notifier webhooks enable`.",
        unit="s",
    )
    rotation_overlap: float = setting(
        "NOTIFIER_WEBHOOK_ROTATION_OVERLAP",
        parse.seconds(0, 30 * DAY),
        DAY,
        "After `notifier webhooks rotate`, how long the old secret signs beside the new one.",
        unit="s",
    )
    allow_private: bool = setting(
        "NOTIFIER_WEBHOOK_ALLOW_PRIVATE",
        parse.boolean,
        False,
        "Allow http:// endpoints and ones on loopback, private, link-local or metadata "
        "addresses (tests, development, a receiver on the operator's own network).",
    )
    sweep_interval: float = setting(
        "NOTIFIER_WEBHOOK_SWEEP_INTERVAL",
        parse.seconds(0.01, 3600),
        10.0,
        "Time between the webhook sender's looks for due retries and lapsed leases (it is "
        "woken at once by NOTIFY for new deliveries, and times its own retries).",
        unit="s",
    )


@dataclass(frozen=True, slots=True)
class Thresholds(Group):
    """When `notifier stats` exits non-zero."""

    oldest_pending: float = setting(
        "NOTIFIER_ALERT_OLDEST_PENDING",
        parse.seconds(0, 30 * DAY),
        300.0,
        "How long the oldest due pending row may wait.",
        unit="s",
    )
    expired_leases: int = setting(
        "NOTIFIER_ALERT_EXPIRED_LEASES",
        parse.integer(0, 10**9),
        10,
        "Sending rows with an expired lease tolerated (a crashed worker leaves some).",
    )
    sweep_share: float = setting(
        "NOTIFIER_ALERT_SWEEP_SHARE",
        parse.fraction,
        0.5,
        "The largest share of claims found by the sweep rather than a notification, among at "
        "least 20 (lost NOTIFYs).",
    )


LogFormat = Literal["json", "text"]


@dataclass(frozen=True, slots=True)
class LogSettings(Group):
    """How log lines look."""

    format: LogFormat | None = setting(
        "NOTIFIER_LOG_FORMAT",
        parse.choice(LogFormat),
        None,
        "json (for a log pipeline) or text (for a person).",
        default_text="json; text for notifier dev",
    )


# Every group, in the order --help and the docs list them.
GROUPS: tuple[type[Group], ...] = (
    DatabaseSettings,
    ApiSettings,
    TokenSettings,
    RequestSettings,
    CodeSettings,
    WorkerSettings,
    SmtpSettings,
    MessageSettings,
    InboundSettings,
    RetentionSettings,
    WebhookSettings,
    Thresholds,
    LogSettings,
)
