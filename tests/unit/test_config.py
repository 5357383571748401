"""Settings: defaults, and invalid values stopped at start with the variable named."""

from __future__ import annotations

import secrets

import pytest

from notifier.config import (
    GROUPS,
    DatabaseSettings,
    MessageSettings,
    RequestSettings,
    SmtpSettings,
    TokenSettings,
    WorkerSettings,
)
from notifier.errors import ConfigError
from notifier.settings_spec import specs


def test_defaults_need_no_environment() -> None:
    worker = WorkerSettings.from_env({})
    assert (worker.mode, worker.sweep_interval, worker.lease_seconds) == ("notify", 10.0, 60.0)
    assert SmtpSettings.from_env({}).port == 25


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("NOTIFIER_MODE", "telepathy"),
        ("NOTIFIER_POLL_INTERVAL", "-1"),
        ("NOTIFIER_SWEEP_INTERVAL", "soon"),
        ("NOTIFIER_LEASE_SECONDS", "0"),
        ("NOTIFIER_CONCURRENCY", "0"),
        ("NOTIFIER_BATCH_SIZE", "1.5"),
        ("NOTIFIER_RETRY_JITTER", "1"),
        ("NOTIFIER_RETRY_FACTOR", "0.5"),
        ("NOTIFIER_TRANSPORT", "pigeon"),
    ],
)
def test_invalid_worker_setting_names_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        WorkerSettings.from_env({variable: value})
    assert caught.value.setting == variable
    assert variable in str(caught.value)


def test_retry_ceiling_below_base_is_refused() -> None:
    with pytest.raises(ConfigError, match="NOTIFIER_RETRY_CEILING"):
        WorkerSettings.from_env({"NOTIFIER_RETRY_BASE": "100", "NOTIFIER_RETRY_CEILING": "10"})


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("NOTIFIER_SMTP_PORT", "70000"),
        ("NOTIFIER_SMTP_TLS", "ssl3"),
        ("NOTIFIER_MAIL_FROM", "not-an-address"),
        ("NOTIFIER_MAIL_FROM", "a@b.com\r\nBcc: x@y.z"),
        ("NOTIFIER_SMTP_DATA_TIMEOUT", "0"),
    ],
)
def test_invalid_smtp_setting_names_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        SmtpSettings.from_env({variable: value})


def test_missing_token_secret_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="NOTIFIER_TOKEN_SECRET"):
        TokenSettings.from_env({})


def test_short_token_secret_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as caught:
        TokenSettings.from_env({"NOTIFIER_TOKEN_SECRET": "hunter2"})
    assert "hunter2" not in str(caught.value)


def test_several_secrets_are_kept_newest_first() -> None:
    new, old = "Vq2u8S1bX0kRz7YpMd4LwNf6HcJ3aT9eGi5Qo", "Lr9Kc2Wx7Pb4Nq1Zs8Hd6Ty3Fg5Mj0Ve2Ua"
    assert TokenSettings.from_env({"NOTIFIER_TOKEN_SECRET": f"{new}, {old}"}).secrets == (new, old)


def test_database_url_must_be_postgresql() -> None:
    with pytest.raises(ConfigError, match="NOTIFIER_DATABASE_URL"):
        DatabaseSettings.from_env({"NOTIFIER_DATABASE_URL": "sqlite:///x"})


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("NOTIFIER_PRODUCT_NAME", "Acme\r\nBcc: victim@example.org"),
        ("NOTIFIER_PRODUCT_NAME", "A" * 101),
        ("NOTIFIER_MAIL_FROM_NAME", "Acme\tSupport"),
    ],
)
def test_invalid_message_setting_names_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        MessageSettings.from_env({variable: value})
    assert caught.value.setting == variable


def test_sender_name_defaults_to_the_product_name() -> None:
    assert MessageSettings.from_env({}).sender_name == "notifier"
    assert MessageSettings.from_env({"NOTIFIER_PRODUCT_NAME": "Acme"}).sender_name == "Acme"
    named = MessageSettings.from_env(
        {"NOTIFIER_PRODUCT_NAME": "Acme", "NOTIFIER_MAIL_FROM_NAME": "Acme Accounts"}
    )
    assert named.sender_name == "Acme Accounts"


@pytest.mark.parametrize(
    "example",
    [
        # The values this repository's compose file and Kubernetes Secret used to ship.
        "compose-demo-secret-change-me-0123456789abcdef",
        "CHANGE-ME-to-a-random-string-of-at-least-32-characters",
        "a" * 32,
        "test-secret-" + "x" * 32,
        "password" * 4,
    ],
)
def test_example_and_low_entropy_secrets_are_refused_with_how_to_make_one(example: str) -> None:
    with pytest.raises(ConfigError) as caught:
        TokenSettings.from_env({"NOTIFIER_TOKEN_SECRET": example})
    assert "secrets.token_urlsafe(32)" in str(caught.value)
    assert example not in str(caught.value)


def test_a_generated_secret_is_accepted() -> None:
    secret = secrets.token_urlsafe(32)
    assert TokenSettings.from_env({"NOTIFIER_TOKEN_SECRET": secret}).secrets == (secret,)


def test_dev_mode_accepts_any_secret_of_the_right_length() -> None:
    settings = TokenSettings.from_env({"NOTIFIER_TOKEN_SECRET": "a" * 32}, strict=False)
    assert settings.secrets == ("a" * 32,)


def test_listen_url_defaults_to_the_database_url() -> None:
    settings = DatabaseSettings.from_env({"NOTIFIER_DATABASE_URL": "postgresql://db/app"})
    assert settings.listen_url_for("postgresql://db/app") == "postgresql://db/app"


def test_listen_url_can_bypass_the_pooler_the_database_url_goes_through() -> None:
    settings = DatabaseSettings.from_env(
        {
            "NOTIFIER_DATABASE_URL": "postgresql://pgbouncer:6432/app",
            "NOTIFIER_LISTEN_DATABASE_URL": "postgresql://db:5432/app",
            "NOTIFIER_STATEMENT_CACHE_SIZE": "0",
        }
    )
    assert settings.listen_url_for("postgresql://pgbouncer:6432/app") == "postgresql://db:5432/app"
    assert settings.statement_cache_size == 0


def test_listen_url_without_a_database_url_is_refused() -> None:
    with pytest.raises(ConfigError, match="NOTIFIER_DATABASE_URL too"):
        DatabaseSettings.from_env({"NOTIFIER_LISTEN_DATABASE_URL": "postgresql://db/app"})


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("NOTIFIER_LISTEN_DATABASE_URL", "mysql://db/app"),
        ("NOTIFIER_STATEMENT_CACHE_SIZE", "-1"),
        ("NOTIFIER_STATEMENT_CACHE_SIZE", "many"),
    ],
)
def test_invalid_database_setting_names_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        DatabaseSettings.from_env({"NOTIFIER_DATABASE_URL": "postgresql://db/app", variable: value})
    assert caught.value.setting == variable


def test_the_retry_ceiling_is_a_request_setting_not_read_by_the_worker_group() -> None:
    # The API reads NOTIFIER_MAX_ATTEMPTS (stored on each new delivery) without reading the
    # worker's settings, so a bad retry ceiling cannot stop the API.
    with pytest.raises(ConfigError, match="NOTIFIER_MAX_ATTEMPTS"):
        RequestSettings.from_env({"NOTIFIER_MAX_ATTEMPTS": "1000"})


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("NOTIFIER_API_PORT", "abc", "must be a whole number"),
        ("NOTIFIER_SMTP_CONNECT_TIMEOUT", "soon", "must be a number"),
    ],
)
def test_a_bad_value_is_explained_by_variable_value_and_what_is_expected(
    variable: str, value: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_group_with({variable: value})
    message = str(caught.value)
    assert message.startswith(f"{variable}: {expected}") and repr(value) in message
    assert "invalid literal" not in message and "could not convert" not in message


def load_group_with(env: dict[str, str]) -> object:
    for group in GROUPS:
        if any(spec.name in env for _, spec in specs(group)):
            return group.from_env(env)
    raise AssertionError(f"no group declares {env}")


def test_the_default_sends_in_flight_match_the_default_smtp_connections() -> None:
    # More sends than connections would make claims wait for a connection while they age.
    assert WorkerSettings.from_env({}).concurrency == SmtpSettings.from_env({}).pool_size
