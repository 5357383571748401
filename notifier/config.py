"""Settings: every NOTIFIER_* environment variable, declared once and read by one function.

Each setting is a field declared with `setting(...)` (notifier.settings_spec): its variable,
parser, default, unit and meaning side by side. `Group.from_env()` reads a group through
`settings_spec.load`, the one place the environment is read. An invalid value raises
ConfigError naming the variable, the value and what is expected, so the process stops at
start with a clear message. `GROUPS` lists every group, for `--help` and the docs test.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args
from urllib.parse import urlsplit

from notifier.errors import ConfigError
from notifier.mailbox_providers import SHARED_DOMAINS
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


# -- parsers: text to value, or ValueError saying what is expected ---------------------------


def _seconds(low: float, high: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        value = float(raw)
        if not low <= value <= high:
            raise ValueError(f"must be between {low:g} and {high:g} seconds")
        return value

    return parse


def _integer(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = int(raw)
        if not low <= value <= high:
            raise ValueError(f"must be an integer between {low} and {high}")
        return value

    return parse


def _choice(kind: Any) -> Callable[[str], Any]:
    """A parser for one of a Literal type's words (case-insensitive)."""
    choices = get_args(kind)

    def parse(raw: str) -> Any:
        if raw.lower() not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return raw.lower()

    return parse


def _boolean(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _database_url(raw: str) -> str | None:
    if not raw.startswith(("postgres://", "postgresql://")):
        raise ValueError("must be a postgresql:// URL")
    return raw


def _http_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// URL")
    return raw.rstrip("/")


TRACE_ID_PLACEHOLDER = "{trace_id}"


def _trace_url_template(raw: str) -> str | None:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// URL")
    rest = raw.replace(TRACE_ID_PLACEHOLDER, "", 1)
    if TRACE_ID_PLACEHOLDER not in raw or "{" in rest or "}" in rest:
        raise ValueError(f"must hold {TRACE_ID_PLACEHOLDER} once, where the trace id goes")
    return raw


def _address(raw: str) -> str:
    # The sender address is operator configuration, checked for shape only; recipient
    # addresses are validated properly where requests come in.
    local, _, domain = raw.rpartition("@")
    if (
        not local
        or ("." not in domain and domain != "localhost")
        or any(c in raw for c in "\r\n <>")
    ):
        raise ValueError("must be an address like noreply@example.com")
    return raw


def _existing_file(raw: str) -> Path | None:
    path = Path(raw)
    if not path.is_file():
        raise ValueError("must name a readable file")
    return path


def _text(raw: str) -> str:
    if any(c in raw for c in "\r\n"):
        raise ValueError("must be a single line")
    return raw


# Display names longer than this do not fit a mail client's sender column anyway.
DISPLAY_NAME_MAX_CHARS = 100


def _display_name(raw: str) -> str:
    if len(raw) > DISPLAY_NAME_MAX_CHARS or not raw.isprintable():
        raise ValueError(
            f"must be one line of at most {DISPLAY_NAME_MAX_CHARS} printable characters"
        )
    return raw


def _float_at_least(low: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        value = float(raw)
        if value < low:
            raise ValueError(f"must be at least {low:g}")
        return value

    return parse


def _fraction(raw: str) -> float:
    value = float(raw)
    if not 0 <= value < 1:
        raise ValueError("must be a fraction from 0 up to (not including) 1")
    return value


# Shorter secrets make the HMAC key guessable offline from a single leaked link.
MIN_SECRET_LENGTH = 32
# Bits a secret must carry by a per-character entropy estimate. The estimate undercounts
# short random strings (32 hex digits, 128 real bits, score about 112); a repeated
# character or a word with a counter appended scores far less.
MIN_SECRET_BITS = 100
# Words that mark a value copied from an example (this repository's compose file and
# Kubernetes Secret among them) rather than generated.
_PLACEHOLDER_WORDS = ("change-me", "changeme", "change_me", "example", "placeholder", "demo")
_GENERATE_HINT = 'generate one with: python3 -c "import secrets; print(secrets.token_urlsafe(32))"'


def _secret_list(raw: str) -> tuple[str, ...]:
    secrets = tuple(s.strip() for s in raw.split(",") if s.strip())
    if any(len(s) < MIN_SECRET_LENGTH for s in secrets):
        raise ValueError(f"each secret must be at least {MIN_SECRET_LENGTH} characters")
    return secrets


def _strong_secret_list(raw: str) -> tuple[str, ...]:
    """`_secret_list`, refusing values copied from examples and values too regular to be
    random; `notifier dev` alone accepts any (and makes its own when none is given)."""
    secrets = _secret_list(raw)
    for position, secret in enumerate(secrets, 1):
        which = f"secret {position}" if len(secrets) > 1 else "the secret"
        lowered = secret.lower()
        if any(word in lowered for word in _PLACEHOLDER_WORDS):
            raise ValueError(f"{which} is an example value, not a secret; {_GENERATE_HINT}")
        if estimated_bits(secret) < MIN_SECRET_BITS:
            raise ValueError(f"{which} is too regular to be random; {_GENERATE_HINT}")
    return secrets


def estimated_bits(secret: str) -> float:
    """Shannon entropy of the characters, times the length: a rough upper bound on how
    much guessing the secret takes (exact for independent random characters)."""
    counts = Counter(secret)
    return -sum(n * math.log2(n / len(secret)) for n in counts.values())


def _separators(raw: str) -> str:
    if len(raw) > 4 or any(c.isalnum() or c.isspace() or c in '@"' for c in raw):
        raise ValueError("must be up to 4 punctuation characters, such as + or +-")
    return raw


def _domains(raw: str) -> frozenset[str]:
    domains = frozenset(d.strip().lower() for d in raw.split(",") if d.strip())
    if any(not d.isascii() or "." not in d or any(c in d for c in " @/") for d in domains):
        raise ValueError("must be comma-separated domains in ASCII (IDNA) form, like gmail.com")
    return domains


# -- the groups --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DatabaseSettings(Group):
    """Where the database is: a server URL, or an embedded server in a data directory."""

    url: str | None = setting(
        "NOTIFIER_DATABASE_URL",
        _database_url,
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
        _database_url,
        None,
        "Where the workers' LISTEN connections and `notifier migrate` go (a session of their "
        "own); lets the pools go through a transaction-mode pooler.",
        default_text="NOTIFIER_DATABASE_URL",
    )
    statement_cache_size: int = setting(
        "NOTIFIER_STATEMENT_CACHE_SIZE",
        _integer(0, 10_000),
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

    host: str = setting("NOTIFIER_SMTP_HOST", _text, "localhost", "The mail server.")
    port: int = setting("NOTIFIER_SMTP_PORT", _integer(1, 65535), 25, "Its port.")
    username: str | None = setting(
        "NOTIFIER_SMTP_USERNAME", _text, None, "AUTH user name; unset: no AUTH."
    )
    password: str | None = setting(
        "NOTIFIER_SMTP_PASSWORD", str, None, "AUTH password.", secret=True
    )
    tls: TlsMode = setting(
        "NOTIFIER_SMTP_TLS",
        _choice(TlsMode),
        "none",
        "none (plain), starttls (upgrade, required) or tls (implicit, port 465).",
    )
    validate_certs: bool = setting(
        "NOTIFIER_SMTP_VALIDATE_CERTS",
        _boolean,
        True,
        "Verify the server's certificate (turn off only for tests).",
    )
    ca_file: Path | None = setting(
        "NOTIFIER_SMTP_CA_FILE",
        _existing_file,
        None,
        "PEM bundle of the authorities to trust (a private relay's CA); unset: the system's.",
    )
    connect_timeout: float = setting(
        "NOTIFIER_SMTP_CONNECT_TIMEOUT",
        _seconds(0.1, 600),
        10.0,
        "Time to connect, greet, STARTTLS and AUTH.",
        unit="s",
    )
    command_timeout: float = setting(
        "NOTIFIER_SMTP_COMMAND_TIMEOUT",
        _seconds(0.1, 600),
        30.0,
        "Time for each reply before the message body.",
        unit="s",
    )
    data_timeout: float = setting(
        "NOTIFIER_SMTP_DATA_TIMEOUT",
        _seconds(0.1, 1200),
        120.0,
        "Time for the reply after the body; a timeout there is an unknown outcome (the "
        "server may have kept the message).",
        unit="s",
    )
    pool_size: int = setting(
        "NOTIFIER_SMTP_POOL_SIZE",
        _integer(1, 256),
        8,
        "Connections kept open to the server per worker process.",
    )
    mail_from: str = setting(
        "NOTIFIER_MAIL_FROM", _address, "notifier@localhost", "The From address of every message."
    )
    message_id_domain: str | None = setting(
        "NOTIFIER_MESSAGE_ID_DOMAIN",
        _text,
        None,
        "Right-hand side of the stable Message-IDs.",
        default_text="the domain of NOTIFIER_MAIL_FROM",
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
        _display_name,
        DEFAULT_PRODUCT_NAME,
        "The product the email names (subject, heading, footer).",
    )
    mail_from_name: str | None = setting(
        "NOTIFIER_MAIL_FROM_NAME",
        _display_name,
        None,
        'The display name in the From header ("Acme" <noreply@...>).',
        default_text="NOTIFIER_PRODUCT_NAME",
    )
    template_dir: Path | None = setting(
        "NOTIFIER_TEMPLATE_DIR",
        Path,
        None,
        "A directory of template overrides: files at its top replace the English ones, files "
        "in <locale>/ those of that language.",
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
        _choice(Mode),
        "notify",
        "notify (LISTEN, plus a slow sweep) or poll (no LISTEN).",
    )
    poll_interval: float = setting(
        "NOTIFIER_POLL_INTERVAL",
        _seconds(0.001, 3600),
        1.0,
        "Time between polls in poll mode.",
        unit="s",
    )
    sweep_interval: float = setting(
        "NOTIFIER_SWEEP_INTERVAL",
        _seconds(0.01, 3600),
        10.0,
        "Time between fallback sweeps in notify mode (jittered by a tenth).",
        unit="s",
    )
    lease_seconds: float = setting(
        "NOTIFIER_LEASE_SECONDS",
        _seconds(1, 3600),
        60.0,
        "How long a claim owns a row without renewal; renewed every third of it while a send "
        "is in flight. A crashed worker's rows return after this long.",
        unit="s",
    )
    concurrency: int = setting(
        "NOTIFIER_CONCURRENCY",
        _integer(1, 1024),
        8,
        "Sends in flight per worker process; keep it equal to NOTIFIER_SMTP_POOL_SIZE, or "
        "claims wait for a connection.",
    )
    domain_concurrency: int | None = setting(
        "NOTIFIER_DOMAIN_CONCURRENCY",
        _integer(1, 1024),
        None,
        "Sends in flight to one recipient domain per worker process; its other rows wait in "
        "the database, holding no slot, so one slow domain cannot hold every send slot.",
        default_text="half of NOTIFIER_CONCURRENCY, rounded up",
    )
    batch_size: int = setting(
        "NOTIFIER_BATCH_SIZE",
        _integer(1, 1000),
        100,
        "The most rows one claim, pre-send check or completion takes.",
    )
    retry_base: float = setting(
        "NOTIFIER_RETRY_BASE",
        _seconds(0.001, DAY),
        60.0,
        "Retry n waits base * factor^(n-1), jittered, at most the ceiling.",
        unit="s",
    )
    retry_factor: float = setting(
        "NOTIFIER_RETRY_FACTOR", _float_at_least(1.0), 5.0, "The retry delay's growth factor."
    )
    retry_ceiling: float = setting(
        "NOTIFIER_RETRY_CEILING",
        _seconds(0.001, 7 * DAY),
        900.0,
        "The longest retry delay.",
        unit="s",
    )
    retry_jitter: float = setting(
        "NOTIFIER_RETRY_JITTER",
        _fraction,
        0.2,
        "The fraction by which a retry delay is randomly shortened or lengthened.",
    )
    unknown_outcome_limit: int = setting(
        "NOTIFIER_UNKNOWN_OUTCOME_LIMIT",
        _integer(1, 100),
        3,
        "Unknown outcomes (the connection lost after the body) before a delivery is failed and "
        "flagged rather than sent again.",
    )
    shutdown_grace: float = setting(
        "NOTIFIER_SHUTDOWN_GRACE",
        _seconds(0, 3600),
        30.0,
        "Time in-flight sends get to finish after SIGTERM.",
        unit="s",
    )
    listener_check_interval: float = setting(
        "NOTIFIER_LISTENER_CHECK_INTERVAL",
        _seconds(0.05, 3600),
        15.0,
        "Time between the LISTEN connection's self-notification round trips.",
        unit="s",
    )
    listener_check_timeout: float = setting(
        "NOTIFIER_LISTENER_CHECK_TIMEOUT",
        _seconds(0.05, 600),
        5.0,
        "How long one round trip may take before the listener is replaced.",
        unit="s",
    )
    transport: TransportKind = setting(
        "NOTIFIER_TRANSPORT",
        _choice(TransportKind),
        "smtp",
        "smtp, or null (accepts everything at once; for benchmarks).",
    )
    suppression_ttl: float = setting(
        "NOTIFIER_SUPPRESSION_TTL",
        _seconds(60, 3650 * DAY),
        30 * DAY,
        "How long a mailbox the recipient's server refused for good stays suppressed.",
        unit="s",
    )

    @property
    def per_domain(self) -> int:
        """The sends in flight one recipient domain may hold (see domain_concurrency)."""
        if self.domain_concurrency is not None:
            return self.domain_concurrency
        return (self.concurrency + 1) // 2

    def check(self) -> None:
        """Cross-field rules that single values cannot express."""
        if self.retry_ceiling < self.retry_base:
            raise ConfigError("NOTIFIER_RETRY_CEILING", "must not be below NOTIFIER_RETRY_BASE")


@dataclass(frozen=True, slots=True)
class TokenSettings(Group):
    """The secret that verification tokens are derived from, and how long they live."""

    secrets: tuple[str, ...] = setting(
        "NOTIFIER_TOKEN_SECRET",
        _strong_secret_list,
        (),
        "One or more secrets, comma-separated, newest first, each at least 32 characters of "
        "a generator's output. Removing one revokes the links made with it.",
        secret=True,
        default_text="required (notifier dev makes its own)",
    )
    ttl_seconds: float = setting(
        "NOTIFIER_TOKEN_TTL",
        _seconds(60, 30 * DAY),
        3600.0,
        "How long a verification link stays valid (independent of leases).",
        unit="s",
    )
    public_url: str = setting(
        "NOTIFIER_PUBLIC_URL",
        _http_url,
        "http://127.0.0.1:8001",
        "Where people reach the public listener (through its reverse proxy); links are "
        "{url}/verify?token=...",
    )

    @classmethod
    def from_env(
        cls, env: Env | None = None, *, required: bool = True, strict: bool = True
    ) -> TokenSettings:
        """The token settings; `strict` (all but `notifier dev`) refuses weak secrets."""
        settings = load(cls, env, parsers=None if strict else {"secrets": _secret_list})
        if required and not settings.secrets:
            raise ConfigError(
                "NOTIFIER_TOKEN_SECRET",
                f"is required: set it to a random string of at least 32 characters; "
                f"{_GENERATE_HINT}",
            )
        return settings


@dataclass(frozen=True, slots=True)
class RequestSettings(Group):
    """Limits on verification requests, and what each new delivery is given. Every limit
    counts canonical mailboxes (lowercased, sub-address tags stripped, IDNA domain)."""

    idempotency_ttl: float = setting(
        "NOTIFIER_IDEMPOTENCY_TTL",
        _seconds(60, 30 * DAY),
        DAY,
        "How long an Idempotency-Key is remembered (then reusable).",
        unit="s",
    )
    resend_limit: int = setting(
        "NOTIFIER_RESEND_LIMIT",
        _integer(1, 1_000_000),
        5,
        "Requests per user and per mailbox within the window; beyond it, 429.",
    )
    resend_window: float = setting(
        "NOTIFIER_RESEND_WINDOW",
        _seconds(1, 30 * DAY),
        3600.0,
        "The window every limit counts requests in.",
        unit="s",
    )
    domain_limit: int = setting(
        "NOTIFIER_DOMAIN_LIMIT",
        _integer(0, 10**9),
        1000,
        "Requests per recipient domain per API key per window (0: none); not counted for "
        "the shared providers' domains.",
    )
    shared_domains: frozenset[str] = setting(
        "NOTIFIER_SHARED_MAIL_DOMAINS",
        _domains,
        frozenset(SHARED_DOMAINS),
        "Domains of millions of unrelated mailboxes (Gmail, Outlook, ...), comma-separated, "
        "where no domain budget applies: it would refuse that provider's real users.",
        empty=True,
        default_text="the largest consumer providers (notifier.mailbox_providers)",
    )
    client_limit: int = setting(
        "NOTIFIER_CLIENT_LIMIT",
        _integer(0, 10**9),
        10_000,
        "Requests per API key per window (0: none).",
    )
    global_limit: int = setting(
        "NOTIFIER_GLOBAL_LIMIT",
        _integer(0, 10**9),
        100_000,
        "Requests in all per window (0: none).",
    )
    subaddress_separators: str = setting(
        "NOTIFIER_SUBADDRESS_SEPARATORS",
        _separators,
        "+",
        'Characters that start a sub-address tag ("ada+news@" is "ada@"); empty: none.',
        empty=True,
    )
    max_attempts: int = setting(
        "NOTIFIER_MAX_ATTEMPTS",
        _integer(1, 100),
        5,
        "Attempts per delivery before it fails (stored on each new delivery).",
    )


@dataclass(frozen=True, slots=True)
class ApiSettings(Group):
    """Where the two HTTP listeners listen, and what one client can hold of them."""

    host: str = setting(
        "NOTIFIER_API_HOST",
        _text,
        "127.0.0.1",
        "The internal API's address (/v1/*, /metrics, /docs, /console; keys required). "
        "Never public.",
    )
    port: int = setting("NOTIFIER_API_PORT", _integer(1, 65535), 8000, "Its port.")
    public_host: str = setting(
        "NOTIFIER_PUBLIC_HOST",
        _text,
        "127.0.0.1",
        "The public pages' address (/verify, the JSON confirm): the one to expose, behind a "
        "reverse proxy.",
    )
    public_port: int = setting("NOTIFIER_PUBLIC_PORT", _integer(1, 65535), 8001, "Its port.")
    max_body_bytes: int = setting(
        "NOTIFIER_MAX_BODY_BYTES",
        _integer(256, 1024 * 1024),
        16 * 1024,
        "Larger request bodies get 413.",
        unit="bytes",
    )
    header_timeout: float = setting(
        "NOTIFIER_HTTP_HEADER_TIMEOUT",
        _seconds(0.1, 600),
        10.0,
        "Time a connection gets to send a request's head (from opening, and after each "
        "response); then it is closed.",
        unit="s",
    )
    body_timeout: float = setting(
        "NOTIFIER_HTTP_BODY_TIMEOUT",
        _seconds(0.1, 600),
        10.0,
        "Time a client gets to send a whole request body; then 408.",
        unit="s",
    )
    keepalive_timeout: int = setting(
        "NOTIFIER_HTTP_KEEPALIVE_TIMEOUT",
        _integer(1, 600),
        5,
        "How long an idle kept-alive connection stays open.",
        unit="s",
    )
    limit_concurrency: int = setting(
        "NOTIFIER_HTTP_LIMIT_CONCURRENCY",
        _integer(1, 1_000_000),
        1000,
        "Connections plus requests in progress per listener; beyond it, 503 at once.",
    )
    trace_url_template: str | None = setting(
        "NOTIFIER_TRACE_URL_TEMPLATE",
        _trace_url_template,
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
        _seconds(0, 3650 * DAY),
        7 * DAY,
        "Time after a delivery finished (and its link expired) before everything derived "
        "from its address is scrubbed; older expired links cannot be renewed.",
        unit="s",
    )
    retention: float = setting(
        "NOTIFIER_RETENTION",
        _seconds(0, 3650 * DAY),
        30 * DAY,
        "Time after a delivery finished before it is deleted.",
        unit="s",
    )
    batch: int = setting(
        "NOTIFIER_CLEANUP_BATCH",
        _integer(1, 100_000),
        1000,
        "Rows per cleanup statement, so no delete holds many locks.",
    )
    interval: float = setting(
        "NOTIFIER_CLEANUP_INTERVAL",
        _seconds(0, 30 * DAY),
        3600.0,
        "Time between the workers' cleanup runs; 0 turns them off.",
        unit="s",
    )

    def check(self) -> None:
        if self.scrub_after > self.retention:
            raise ConfigError("NOTIFIER_SCRUB_AFTER", "must not exceed NOTIFIER_RETENTION")


@dataclass(frozen=True, slots=True)
class Thresholds(Group):
    """When `notifier stats` exits non-zero."""

    oldest_pending: float = setting(
        "NOTIFIER_ALERT_OLDEST_PENDING",
        _seconds(0, 30 * DAY),
        300.0,
        "How long the oldest due pending row may wait.",
        unit="s",
    )
    expired_leases: int = setting(
        "NOTIFIER_ALERT_EXPIRED_LEASES",
        _integer(0, 10**9),
        10,
        "Sending rows with an expired lease tolerated (a crashed worker leaves some).",
    )
    sweep_share: float = setting(
        "NOTIFIER_ALERT_SWEEP_SHARE",
        _fraction,
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
        _choice(LogFormat),
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
    WorkerSettings,
    SmtpSettings,
    MessageSettings,
    RetentionSettings,
    Thresholds,
    LogSettings,
)
