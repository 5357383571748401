"""Settings: every NOTIFIER_* environment variable, parsed and validated once at start.

Each field documents its variable, default and unit where it is defined. An invalid value
raises ConfigError naming the variable, so the process stops at start with a clear message.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar
from urllib.parse import urlsplit

from notifier.errors import ConfigError

T = TypeVar("T")
Env = Mapping[str, str]

DEFAULT_DATA_DIR = Path(".notifier")


def _read(
    env: Env,
    name: str,
    parse: Callable[[str], T],
    default: T,
    *,
    secret: bool = False,
    empty: bool = False,
) -> T:
    """`name`'s value parsed, or `default` when unset (or blank, unless `empty` allows it)."""
    raw = env.get(name)
    if raw is None or (raw.strip() == "" and not (empty and raw == "")):
        return default
    try:
        return parse(raw.strip())
    except ValueError as exc:
        shown = "" if secret else f" (got {raw!r})"
        raise ConfigError(name, f"{exc}{shown}") from exc


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


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
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


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    """Where the database is: a server URL, or an embedded server in a data directory."""

    # NOTIFIER_DATABASE_URL: a postgresql:// URL. Unset: notifier runs an embedded
    # PostgreSQL in data_dir, starting it on demand and stopping it at exit.
    url: str | None = None
    # NOTIFIER_DATA_DIR: the directory the embedded server owns (created on first use).
    data_dir: Path = DEFAULT_DATA_DIR
    # NOTIFIER_LISTEN_DATABASE_URL: where the workers' LISTEN connections and `notifier
    # migrate` go; both need a session of their own (direct, or a session-mode pooler).
    # Unset: NOTIFIER_DATABASE_URL. Lets the pools go through a transaction-mode pooler.
    listen_url: str | None = None
    # NOTIFIER_STATEMENT_CACHE_SIZE: prepared statements each connection to
    # NOTIFIER_DATABASE_URL keeps (asyncpg's statement_cache_size). 0 turns named prepared
    # statements off, as PgBouncer in transaction or statement mode needs before 1.21 (or
    # without max_prepared_statements): a statement prepared in one transaction would be
    # missing on the next server connection.
    statement_cache_size: int = 100

    @classmethod
    def from_env(cls, env: Env | None = None) -> DatabaseSettings:
        env = os.environ if env is None else env
        d = cls()
        settings = cls(
            url=_read(env, "NOTIFIER_DATABASE_URL", _database_url, None),
            data_dir=_read(env, "NOTIFIER_DATA_DIR", Path, DEFAULT_DATA_DIR),
            listen_url=_read(env, "NOTIFIER_LISTEN_DATABASE_URL", _database_url, None),
            statement_cache_size=_read(
                env, "NOTIFIER_STATEMENT_CACHE_SIZE", _integer(0, 10_000), d.statement_cache_size
            ),
        )
        if settings.listen_url is not None and settings.url is None:
            raise ConfigError(
                "NOTIFIER_LISTEN_DATABASE_URL",
                "needs NOTIFIER_DATABASE_URL too (the embedded server has one address)",
            )
        return settings

    def listen_url_for(self, url: str) -> str:
        """The LISTEN (and migration) URL, given the URL the pools use."""
        return self.listen_url or url


TlsMode = Literal["none", "starttls", "tls"]


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    """How to reach the mail server, and who the mail is from."""

    # NOTIFIER_SMTP_HOST: the mail server's host name or address.
    host: str = "localhost"
    # NOTIFIER_SMTP_PORT: its port.
    port: int = 25
    # NOTIFIER_SMTP_USERNAME / NOTIFIER_SMTP_PASSWORD: AUTH credentials; unset means no AUTH.
    username: str | None = None
    password: str | None = None
    # NOTIFIER_SMTP_TLS: none (plain), starttls (upgrade, required) or tls (implicit, port 465).
    tls: TlsMode = "none"
    # NOTIFIER_SMTP_VALIDATE_CERTS: verify the server's certificate (turn off only for tests).
    validate_certs: bool = True
    # NOTIFIER_SMTP_CA_FILE: PEM bundle of the authorities to trust (a private relay's CA);
    # unset: the system's.
    ca_file: Path | None = None
    # NOTIFIER_SMTP_CONNECT_TIMEOUT: seconds to connect and greet.
    connect_timeout: float = 10.0
    # NOTIFIER_SMTP_COMMAND_TIMEOUT: seconds to wait for each reply before DATA.
    command_timeout: float = 30.0
    # NOTIFIER_SMTP_DATA_TIMEOUT: seconds to wait for the reply after the message body; a
    # timeout there is an unknown outcome (the server may have kept the message).
    data_timeout: float = 120.0
    # NOTIFIER_SMTP_POOL_SIZE: connections kept open to the server (at most this many sends
    # run at once per worker process).
    pool_size: int = 8
    # NOTIFIER_MAIL_FROM: the From address of every message.
    mail_from: str = "notifier@localhost"
    # NOTIFIER_MESSAGE_ID_DOMAIN: the right-hand side of Message-IDs; default: mail_from's domain.
    message_id_domain: str | None = None

    @property
    def id_domain(self) -> str:
        return self.message_id_domain or self.mail_from.rpartition("@")[2]

    @classmethod
    def from_env(cls, env: Env | None = None) -> SmtpSettings:
        env = os.environ if env is None else env
        d = cls()
        return cls(
            host=_read(env, "NOTIFIER_SMTP_HOST", _text, d.host),
            port=_read(env, "NOTIFIER_SMTP_PORT", _integer(1, 65535), d.port),
            username=_read(env, "NOTIFIER_SMTP_USERNAME", _text, d.username),
            password=_read(env, "NOTIFIER_SMTP_PASSWORD", str, d.password, secret=True),
            tls=_read(env, "NOTIFIER_SMTP_TLS", _choice("none", "starttls", "tls"), d.tls),  # type: ignore[arg-type]
            validate_certs=_read(env, "NOTIFIER_SMTP_VALIDATE_CERTS", _boolean, d.validate_certs),
            ca_file=_read(env, "NOTIFIER_SMTP_CA_FILE", _existing_file, d.ca_file),
            connect_timeout=_read(
                env, "NOTIFIER_SMTP_CONNECT_TIMEOUT", _seconds(0.1, 600), d.connect_timeout
            ),
            command_timeout=_read(
                env, "NOTIFIER_SMTP_COMMAND_TIMEOUT", _seconds(0.1, 600), d.command_timeout
            ),
            data_timeout=_read(
                env, "NOTIFIER_SMTP_DATA_TIMEOUT", _seconds(0.1, 1200), d.data_timeout
            ),
            pool_size=_read(env, "NOTIFIER_SMTP_POOL_SIZE", _integer(1, 256), d.pool_size),
            mail_from=_read(env, "NOTIFIER_MAIL_FROM", _address, d.mail_from),
            message_id_domain=_read(env, "NOTIFIER_MESSAGE_ID_DOMAIN", _text, d.message_id_domain),
        )


# The environment variable naming a directory of template overrides (see messages.Templates).
TEMPLATE_DIR_VARIABLE = "NOTIFIER_TEMPLATE_DIR"
DEFAULT_PRODUCT_NAME = "notifier"


@dataclass(frozen=True, slots=True)
class MessageSettings:
    """What the verification email calls the product, whose name it comes from, and where
    its template overrides are."""

    # NOTIFIER_PRODUCT_NAME: the product the email names (subject, heading, footer).
    product_name: str = DEFAULT_PRODUCT_NAME
    # NOTIFIER_MAIL_FROM_NAME: the display name in the From header ("Acme" <noreply@...>);
    # unset: the product name.
    mail_from_name: str | None = None
    # NOTIFIER_TEMPLATE_DIR: a directory of template overrides (files at its top replace the
    # English ones, files in <locale>/ subdirectories those of that language); unset: the
    # shipped templates only.
    template_dir: Path | None = None

    @property
    def sender_name(self) -> str:
        return self.mail_from_name or self.product_name

    @classmethod
    def from_env(cls, env: Env | None = None) -> MessageSettings:
        env = os.environ if env is None else env
        d = cls()
        return cls(
            product_name=_read(env, "NOTIFIER_PRODUCT_NAME", _display_name, d.product_name),
            mail_from_name=_read(env, "NOTIFIER_MAIL_FROM_NAME", _display_name, d.mail_from_name),
            template_dir=_read(env, TEMPLATE_DIR_VARIABLE, Path, d.template_dir),
        )


Mode = Literal["notify", "poll"]
TransportKind = Literal["smtp", "null"]


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How a worker finds, claims, retries and lets go of deliveries."""

    # NOTIFIER_MODE: notify (LISTEN, plus a slow sweep) or poll (no LISTEN: the baseline).
    mode: Mode = "notify"
    # NOTIFIER_POLL_INTERVAL: seconds between polls in poll mode.
    poll_interval: float = 1.0
    # NOTIFIER_SWEEP_INTERVAL: seconds between fallback sweeps in notify mode.
    sweep_interval: float = 10.0
    # NOTIFIER_LEASE_SECONDS: how long a claim owns a row without renewal; renewed every third
    # of it while a send is in flight. A crashed worker's rows return after this long.
    lease_seconds: float = 60.0
    # NOTIFIER_CONCURRENCY: sends in flight per worker process.
    concurrency: int = 8
    # NOTIFIER_BATCH_SIZE: the most rows one claim takes (only when work has piled up).
    batch_size: int = 100
    # NOTIFIER_MAX_ATTEMPTS: attempts per delivery before it fails (stored on each new row).
    max_attempts: int = 5
    # NOTIFIER_RETRY_BASE / _FACTOR / _CEILING: the n-th retry waits base * factor**(n-1)
    # seconds, jittered, at most the ceiling (defaults: 1 min, 5 min, 15 min, 15 min, ...).
    retry_base: float = 60.0
    retry_factor: float = 5.0
    retry_ceiling: float = 900.0
    # NOTIFIER_RETRY_JITTER: the fraction by which a retry delay is randomly shortened or
    # lengthened, so retries of one outage spread out.
    retry_jitter: float = 0.2
    # NOTIFIER_UNKNOWN_OUTCOME_LIMIT: deliveries whose outcome was unknown this many times are
    # failed and flagged rather than sent again (each retry may be a duplicate).
    unknown_outcome_limit: int = 3
    # NOTIFIER_SHUTDOWN_GRACE: seconds in-flight sends get to finish after SIGTERM.
    shutdown_grace: float = 30.0
    # NOTIFIER_LISTENER_CHECK_INTERVAL: seconds between the listener's self-notification
    # round trips; NOTIFIER_LISTENER_CHECK_TIMEOUT: how long one may take before the
    # listener is declared dead and reconnected.
    listener_check_interval: float = 15.0
    listener_check_timeout: float = 5.0
    # NOTIFIER_TRANSPORT: smtp, or null (accepts everything at once; for benchmarks).
    transport: TransportKind = "smtp"
    # NOTIFIER_SUPPRESSION_TTL: seconds an address the recipient's server refused for good
    # (mailbox unknown, disabled, full) stays suppressed; then requests for it are accepted
    # again, and retention deletes the entry.
    suppression_ttl: float = 30 * 86400.0

    @classmethod
    def from_env(cls, env: Env | None = None) -> WorkerSettings:
        env = os.environ if env is None else env
        d = cls()
        settings = cls(
            mode=_read(env, "NOTIFIER_MODE", _choice("notify", "poll"), d.mode),  # type: ignore[arg-type]
            poll_interval=_read(
                env, "NOTIFIER_POLL_INTERVAL", _seconds(0.001, 3600), d.poll_interval
            ),
            sweep_interval=_read(
                env, "NOTIFIER_SWEEP_INTERVAL", _seconds(0.01, 3600), d.sweep_interval
            ),
            lease_seconds=_read(env, "NOTIFIER_LEASE_SECONDS", _seconds(1, 3600), d.lease_seconds),
            concurrency=_read(env, "NOTIFIER_CONCURRENCY", _integer(1, 1024), d.concurrency),
            batch_size=_read(env, "NOTIFIER_BATCH_SIZE", _integer(1, 1000), d.batch_size),
            max_attempts=_read(env, "NOTIFIER_MAX_ATTEMPTS", _integer(1, 100), d.max_attempts),
            retry_base=_read(env, "NOTIFIER_RETRY_BASE", _seconds(0.001, 86400), d.retry_base),
            retry_factor=_read(env, "NOTIFIER_RETRY_FACTOR", _float_at_least(1.0), d.retry_factor),
            retry_ceiling=_read(
                env, "NOTIFIER_RETRY_CEILING", _seconds(0.001, 7 * 86400), d.retry_ceiling
            ),
            retry_jitter=_read(env, "NOTIFIER_RETRY_JITTER", _fraction, d.retry_jitter),
            unknown_outcome_limit=_read(
                env, "NOTIFIER_UNKNOWN_OUTCOME_LIMIT", _integer(1, 100), d.unknown_outcome_limit
            ),
            shutdown_grace=_read(
                env, "NOTIFIER_SHUTDOWN_GRACE", _seconds(0, 3600), d.shutdown_grace
            ),
            listener_check_interval=_read(
                env,
                "NOTIFIER_LISTENER_CHECK_INTERVAL",
                _seconds(0.05, 3600),
                d.listener_check_interval,
            ),
            listener_check_timeout=_read(
                env,
                "NOTIFIER_LISTENER_CHECK_TIMEOUT",
                _seconds(0.05, 600),
                d.listener_check_timeout,
            ),
            transport=_read(env, "NOTIFIER_TRANSPORT", _choice("smtp", "null"), d.transport),  # type: ignore[arg-type]
            suppression_ttl=_read(
                env, "NOTIFIER_SUPPRESSION_TTL", _seconds(60, 3650 * 86400), d.suppression_ttl
            ),
        )
        settings.check()
        return settings

    def check(self) -> None:
        """Cross-field rules that single values cannot express."""
        if self.retry_ceiling < self.retry_base:
            raise ConfigError("NOTIFIER_RETRY_CEILING", "must not be below NOTIFIER_RETRY_BASE")


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


@dataclass(frozen=True, slots=True)
class TokenSettings:
    """The secret that verification tokens are derived from, and how long they live."""

    # NOTIFIER_TOKEN_SECRET: one or more secrets, comma-separated, newest first; each at least
    # 32 characters. New tokens use the first; the others keep links sent under them working
    # until they expire, so a secret can be rotated without breaking links in flight.
    secrets: tuple[str, ...] = ()
    # NOTIFIER_TOKEN_TTL: seconds a verification link stays valid (independent of leases).
    ttl_seconds: float = 3600.0
    # NOTIFIER_PUBLIC_URL: where people reach the public listener (through the reverse
    # proxy in front of it); links are built as {url}/verify?token=...
    public_url: str = "http://127.0.0.1:8001"

    @classmethod
    def from_env(
        cls, env: Env | None = None, *, required: bool = True, strict: bool = True
    ) -> TokenSettings:
        """The token settings; `strict` (all but `notifier dev`) refuses weak secrets."""
        env = os.environ if env is None else env
        d = cls()
        parse = _strong_secret_list if strict else _secret_list
        secrets = _read(env, "NOTIFIER_TOKEN_SECRET", parse, d.secrets, secret=True)
        if required and not secrets:
            raise ConfigError(
                "NOTIFIER_TOKEN_SECRET",
                f"is required: set it to a random string of at least 32 characters; "
                f"{_GENERATE_HINT}",
            )
        return cls(
            secrets=secrets,
            ttl_seconds=_read(env, "NOTIFIER_TOKEN_TTL", _seconds(60, 30 * 86400), d.ttl_seconds),
            public_url=_read(env, "NOTIFIER_PUBLIC_URL", _http_url, d.public_url),
        )


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


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """Limits on verification requests. Every limit counts canonical mailboxes (lowercased,
    sub-address tags stripped, IDNA domain), so spellings of one address share a budget."""

    # NOTIFIER_IDEMPOTENCY_TTL: seconds an Idempotency-Key is remembered (then reusable).
    idempotency_ttl: float = 86400.0
    # NOTIFIER_RESEND_LIMIT: requests allowed per user and per mailbox within
    # NOTIFIER_RESEND_WINDOW seconds (the window every limit uses); beyond it, 429.
    resend_limit: int = 5
    resend_window: float = 3600.0
    # NOTIFIER_DOMAIN_LIMIT: requests per recipient domain per window (0: no limit); keeps
    # one noisy domain from burning the sender's reputation with it.
    domain_limit: int = 1000
    # NOTIFIER_CLIENT_LIMIT: requests per API key per window (0: no limit).
    client_limit: int = 10_000
    # NOTIFIER_GLOBAL_LIMIT: requests in all per window (0: no limit); a ceiling on what
    # a compromised client or a bug can make the mail server send.
    global_limit: int = 100_000
    # NOTIFIER_SUBADDRESS_SEPARATORS: characters that start a sub-address tag in a local
    # part ("ada+news" is "ada"); empty: none.
    subaddress_separators: str = "+"

    @classmethod
    def from_env(cls, env: Env | None = None) -> RequestSettings:
        env = os.environ if env is None else env
        d = cls()
        return cls(
            idempotency_ttl=_read(
                env, "NOTIFIER_IDEMPOTENCY_TTL", _seconds(60, 30 * 86400), d.idempotency_ttl
            ),
            resend_limit=_read(
                env, "NOTIFIER_RESEND_LIMIT", _integer(1, 1_000_000), d.resend_limit
            ),
            resend_window=_read(
                env, "NOTIFIER_RESEND_WINDOW", _seconds(1, 30 * 86400), d.resend_window
            ),
            domain_limit=_read(env, "NOTIFIER_DOMAIN_LIMIT", _integer(0, 10**9), d.domain_limit),
            client_limit=_read(env, "NOTIFIER_CLIENT_LIMIT", _integer(0, 10**9), d.client_limit),
            global_limit=_read(env, "NOTIFIER_GLOBAL_LIMIT", _integer(0, 10**9), d.global_limit),
            subaddress_separators=_read(
                env,
                "NOTIFIER_SUBADDRESS_SEPARATORS",
                _separators,
                d.subaddress_separators,
                empty=True,
            ),
        )


def _separators(raw: str) -> str:
    if len(raw) > 4 or any(c.isalnum() or c.isspace() or c in '@"' for c in raw):
        raise ValueError("must be up to 4 punctuation characters, such as + or +-")
    return raw


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """Where the two HTTP listeners listen, and what one client can hold of them."""

    # NOTIFIER_API_HOST / NOTIFIER_API_PORT: the internal API (/v1/*, /metrics, /docs), for
    # the app backend, operators and Prometheus; every route but the probes needs a key.
    # Never expose it to the internet.
    host: str = "127.0.0.1"
    port: int = 8000
    # NOTIFIER_PUBLIC_HOST / NOTIFIER_PUBLIC_PORT: the public pages an emailed link opens
    # (/verify, /verify/resend, the JSON confirm) and nothing else; the one port to expose,
    # behind a reverse proxy. NOTIFIER_PUBLIC_URL is where people reach it.
    public_host: str = "127.0.0.1"
    public_port: int = 8001
    # NOTIFIER_MAX_BODY_BYTES: larger request bodies are refused with 413.
    max_body_bytes: int = 16 * 1024
    # NOTIFIER_HTTP_HEADER_TIMEOUT: seconds a connection gets to send a request's head, from
    # when it opens or its previous response was sent; then it is closed.
    header_timeout: float = 10.0
    # NOTIFIER_HTTP_BODY_TIMEOUT: seconds a client gets to send a whole request body before
    # it is answered 408 (a trickled body would hold a connection and a database connection).
    body_timeout: float = 10.0
    # NOTIFIER_HTTP_KEEPALIVE_TIMEOUT: seconds an idle kept-alive connection stays open.
    keepalive_timeout: int = 5
    # NOTIFIER_HTTP_LIMIT_CONCURRENCY: connections plus requests in progress each listener
    # takes on; beyond it, new requests get 503 at once instead of queueing without bound.
    limit_concurrency: int = 1000
    # NOTIFIER_TRACE_URL_TEMPLATE: where the console links a delivery's trace id, with
    # {trace_id} in its place (Jaeger: http://jaeger:16686/trace/{trace_id}). Unset: the
    # console shows the trace id without a link.
    trace_url_template: str | None = None

    @classmethod
    def from_env(cls, env: Env | None = None) -> ApiSettings:
        env = os.environ if env is None else env
        d = cls()
        settings = cls(
            host=_read(env, "NOTIFIER_API_HOST", _text, d.host),
            port=_read(env, "NOTIFIER_API_PORT", _integer(1, 65535), d.port),
            public_host=_read(env, "NOTIFIER_PUBLIC_HOST", _text, d.public_host),
            public_port=_read(env, "NOTIFIER_PUBLIC_PORT", _integer(1, 65535), d.public_port),
            max_body_bytes=_read(
                env, "NOTIFIER_MAX_BODY_BYTES", _integer(256, 1024 * 1024), d.max_body_bytes
            ),
            header_timeout=_read(
                env, "NOTIFIER_HTTP_HEADER_TIMEOUT", _seconds(0.1, 600), d.header_timeout
            ),
            body_timeout=_read(
                env, "NOTIFIER_HTTP_BODY_TIMEOUT", _seconds(0.1, 600), d.body_timeout
            ),
            keepalive_timeout=_read(
                env, "NOTIFIER_HTTP_KEEPALIVE_TIMEOUT", _integer(1, 600), d.keepalive_timeout
            ),
            limit_concurrency=_read(
                env, "NOTIFIER_HTTP_LIMIT_CONCURRENCY", _integer(1, 1_000_000), d.limit_concurrency
            ),
            trace_url_template=_read(
                env, "NOTIFIER_TRACE_URL_TEMPLATE", _trace_url_template, d.trace_url_template
            ),
        )
        if (settings.host, settings.port) == (settings.public_host, settings.public_port):
            raise ConfigError(
                "NOTIFIER_PUBLIC_PORT",
                "the public listener needs an address of its own, not the internal API's "
                f"({settings.host}:{settings.port})",
            )
        return settings


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """How long finished deliveries keep their addresses, and their rows."""

    # NOTIFIER_SCRUB_AFTER: seconds after a delivery finished before its address is redacted.
    scrub_after: float = 7 * 86400.0
    # NOTIFIER_RETENTION: seconds after a delivery finished before it is deleted.
    retention: float = 30 * 86400.0
    # NOTIFIER_CLEANUP_BATCH: rows per statement, so no delete ever holds many locks.
    batch: int = 1000
    # NOTIFIER_CLEANUP_INTERVAL: seconds between the worker's cleanup runs; 0 turns them off.
    interval: float = 3600.0

    @classmethod
    def from_env(cls, env: Env | None = None) -> RetentionSettings:
        env = os.environ if env is None else env
        d = cls()
        settings = cls(
            scrub_after=_read(
                env, "NOTIFIER_SCRUB_AFTER", _seconds(0, 3650 * 86400), d.scrub_after
            ),
            retention=_read(env, "NOTIFIER_RETENTION", _seconds(0, 3650 * 86400), d.retention),
            batch=_read(env, "NOTIFIER_CLEANUP_BATCH", _integer(1, 100_000), d.batch),
            interval=_read(env, "NOTIFIER_CLEANUP_INTERVAL", _seconds(0, 30 * 86400), d.interval),
        )
        if settings.scrub_after > settings.retention:
            raise ConfigError("NOTIFIER_SCRUB_AFTER", "must not exceed NOTIFIER_RETENTION")
        return settings


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When `notifier stats` exits non-zero."""

    # NOTIFIER_ALERT_OLDEST_PENDING: seconds the oldest due pending row may wait.
    oldest_pending: float = 300.0
    # NOTIFIER_ALERT_EXPIRED_LEASES: sending rows with an expired lease tolerated (a crashed
    # worker leaves some until the next sweep).
    expired_leases: int = 10
    # NOTIFIER_ALERT_SWEEP_SHARE: the largest share of claims found by the fallback sweep
    # rather than a notification, among at least 20 claims in the window (lost NOTIFYs).
    sweep_share: float = 0.5

    @classmethod
    def from_env(cls, env: Env | None = None) -> Thresholds:
        env = os.environ if env is None else env
        d = cls()
        return cls(
            oldest_pending=_read(
                env, "NOTIFIER_ALERT_OLDEST_PENDING", _seconds(0, 30 * 86400), d.oldest_pending
            ),
            expired_leases=_read(
                env, "NOTIFIER_ALERT_EXPIRED_LEASES", _integer(0, 10**9), d.expired_leases
            ),
            sweep_share=_read(env, "NOTIFIER_ALERT_SWEEP_SHARE", _fraction, d.sweep_share),
        )
