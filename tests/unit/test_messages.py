"""The verification email: rendered from templates, escaped, and safe in its headers."""

from __future__ import annotations

import email
import email.policy
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path

import pytest

from notifier.errors import ConfigError
from notifier.messages import TEMPLATE_DIR_VARIABLE, OutgoingMessage, Templates

NOW = datetime(2025, 6, 1, 11, 0, 30, tzinfo=UTC)
MESSAGE_ID = "<verify.3f1c2b9e-0000-4000-8000-000000000001@example.com>"


def compose(templates: Templates, **overrides: object) -> OutgoingMessage:
    arguments: dict[str, object] = {
        "message_id": MESSAGE_ID,
        "sender": "noreply@example.com",
        "recipient": "bob@example.com",
        "link": "https://app.example.com/verify?token=abc&x=1",
        "expires_at": NOW + timedelta(minutes=60),
        "purpose": "signup",
        "now": NOW,
    }
    arguments.update(overrides)
    return templates.compose(**arguments)  # type: ignore[arg-type]


def parse(message: OutgoingMessage) -> EmailMessage:
    """What a receiving server makes of the bytes the transport sends."""
    parsed = email.message_from_bytes(message.to_bytes(), policy=email.policy.SMTP)
    assert isinstance(parsed, EmailMessage)
    return parsed


def bodies(parsed: EmailMessage) -> tuple[str, str]:
    text = parsed.get_body(preferencelist=("plain",))
    html = parsed.get_body(preferencelist=("html",))
    assert text is not None and html is not None
    return str(text.get_content()), str(html.get_content())


def test_default_templates_render_every_value() -> None:
    message = compose(Templates.load(None))
    assert message.subject == "Confirm your email address"
    for body in (message.text, message.html):
        assert "bob@example.com" in body
        assert "signup" in body
        assert "60 minutes" in body
        assert "2025-06-01 12:00 UTC" in body
        assert "$" not in body
    assert "https://app.example.com/verify?token=abc&x=1" in message.text


def test_expiry_minutes_are_rounded_down_and_never_negative() -> None:
    templates = Templates.load(None)
    almost_an_hour = compose(templates, expires_at=NOW + timedelta(minutes=60, seconds=-1))
    assert "59 minutes" in almost_an_hour.text
    expired = compose(templates, expires_at=NOW - timedelta(minutes=5))
    assert "0 minutes" in expired.text


def test_values_in_html_are_escaped_but_text_is_not() -> None:
    message = compose(Templates.load(None), purpose='<script>alert("x")</script>')
    assert "<script>" not in message.html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in message.html
    assert 'href="https://app.example.com/verify?token=abc&amp;x=1"' in message.html
    assert '<script>alert("x")</script>' in message.text


def test_email_is_multipart_alternative_with_text_first_then_html() -> None:
    parsed = parse(compose(Templates.load(None)))
    assert parsed.get_content_type() == "multipart/alternative"
    types = [part.get_content_type() for part in parsed.iter_parts()]
    assert types == ["text/plain", "text/html"]
    text, html = bodies(parsed)
    assert "https://app.example.com/verify?token=abc&x=1" in text
    assert "<a href=" in html


def test_headers_are_set_and_message_id_is_exactly_as_given() -> None:
    message = compose(Templates.load(None))
    raw = message.to_email().as_bytes()
    assert f"\r\nMessage-ID: {MESSAGE_ID}\r\n".encode() in raw
    parsed = parse(message)
    assert parsed["From"] == "noreply@example.com"
    assert parsed["To"] == "bob@example.com"
    assert parsed["Subject"] == "Confirm your email address"
    assert parsed["Message-ID"] == MESSAGE_ID
    assert parsed["Date"].datetime == NOW.replace(microsecond=0)
    assert raw.count(b"MIME-Version: 1.0") == 1


def test_every_line_ends_in_crlf() -> None:
    raw = compose(Templates.load(None)).to_email().as_bytes()
    assert raw.count(b"\n") == raw.count(b"\r\n") > 10


def test_non_ascii_text_survives_a_7bit_transfer() -> None:
    message = compose(Templates.load(None), purpose="vérification ✓")
    raw = message.to_email().as_bytes()
    assert raw.isascii()
    text, html = bodies(parse(message))
    assert "vérification ✓" in text
    assert "vérification ✓" in html


def test_line_breaks_in_subject_values_cannot_inject_headers(tmp_path: Path) -> None:
    (tmp_path / "subject.txt").write_text("Confirm $email\n(for $purpose)\n")
    message = compose(Templates.load(tmp_path), purpose="x\r\nBcc: victim@example.org\rX: y")
    assert message.subject == "Confirm bob@example.com (for x Bcc: victim@example.org X: y)"
    parsed = parse(message)
    assert parsed["Bcc"] is None
    assert parsed["X"] is None


def test_a_hand_built_subject_with_line_breaks_is_single_lined_too() -> None:
    message = OutgoingMessage(
        message_id=MESSAGE_ID,
        sender="noreply@example.com",
        recipient="bob@example.com",
        subject="Hello\r\nBcc: victim@example.org",
        text="t",
        html="<p>h</p>",
    )
    parsed = parse(message)
    assert parsed["Subject"] == "Hello Bcc: victim@example.org"
    assert parsed["Bcc"] is None


def test_override_directory_replaces_only_the_files_it_holds(tmp_path: Path) -> None:
    (tmp_path / "body.txt").write_text("Go to $link before $expires_at. Cost: $$5\n")
    templates = Templates.load(tmp_path)
    message = compose(templates)
    assert message.text == (
        "Go to https://app.example.com/verify?token=abc&x=1 before 2025-06-01 12:00 UTC. Cost: $5\n"
    )
    assert message.subject == "Confirm your email address"
    assert "<a href=" in message.html


def test_from_env_reads_the_template_directory(tmp_path: Path) -> None:
    (tmp_path / "subject.txt").write_text("Verify for $purpose")
    templates = Templates.from_env({TEMPLATE_DIR_VARIABLE: str(tmp_path)})
    assert compose(templates).subject == "Verify for signup"
    assert compose(Templates.from_env({})).subject == "Confirm your email address"


def test_missing_override_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=TEMPLATE_DIR_VARIABLE) as caught:
        Templates.load(tmp_path / "nope")
    assert caught.value.setting == TEMPLATE_DIR_VARIABLE


def test_override_path_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "subject.txt").write_text("x")
    with pytest.raises(ConfigError, match=TEMPLATE_DIR_VARIABLE):
        Templates.load(tmp_path / "subject.txt")


def test_override_directory_without_any_template_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "subject.text").write_text("misspelt")
    with pytest.raises(ConfigError, match="holds none of"):
        Templates.load(tmp_path)


def test_unreadable_override_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "body.html").write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ConfigError, match="cannot read"):
        Templates.load(tmp_path)


def test_unknown_variable_in_an_override_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "body.txt").write_text("Hi $name, open $link")
    with pytest.raises(ConfigError, match=r"unknown variable\(s\) \$name"):
        Templates.load(tmp_path)


def test_stray_dollar_in_an_override_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "body.html").write_text("<p>Costs $ 5</p>")
    with pytest.raises(ConfigError, match=r"body\.html"):
        Templates.load(tmp_path)


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        compose(Templates.load(None), now=NOW.replace(tzinfo=None))


def headers_and_bodies(raw: bytes) -> tuple[dict[str, str], tuple[str, str]]:
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    keys = ("From", "To", "Subject", "Message-ID", "Date", "MIME-Version")
    return {k: str(parsed[k]) for k in keys}, bodies(parsed)


@pytest.mark.parametrize(
    "subject",
    ["Confirm your email address", "Bestätigen Sie Ihre Adresse ✓", "x" * 1200],
)
def test_fast_bytes_say_what_the_email_package_would(subject: str) -> None:
    message = compose(Templates.load(None), link="https://a.example/verify?token=t." + "Z" * 43)
    message = OutgoingMessage(
        message.message_id,
        message.sender,
        message.recipient,
        subject,
        message.text + "\n.\nFrom here\n  trailing spaces  \n" + "long " * 60,
        message.html,
        message.date,
    )
    fast = headers_and_bodies(message.to_bytes())
    slow = headers_and_bodies(message.to_email().as_bytes())
    assert fast == slow


def test_fast_bytes_keep_every_line_short_and_crlf_terminated() -> None:
    raw = compose(Templates.load(None), purpose="signup").to_bytes()
    lines = raw.split(b"\r\n")
    assert b"\n" not in b"".join(lines) and b"\r" not in b"".join(lines)
    assert max(len(line) for line in lines) <= 998
    assert raw.isascii()


def test_non_ascii_addresses_go_through_the_email_package_with_smtputf8() -> None:
    message = compose(Templates.load(None), recipient="jösé@exämple.com")
    parsed = email.message_from_bytes(message.to_bytes(), policy=email.policy.SMTPUTF8)
    assert str(parsed["To"]) == "jösé@exämple.com"
