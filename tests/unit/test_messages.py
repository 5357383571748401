"""The verification email: rendered from templates, escaped, and safe in its headers."""

from __future__ import annotations

import binascii
import email
import email.policy
import re
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path

import pytest

from notifier.delivery.messages import TEMPLATE_DIR_VARIABLE, VARIABLES, OutgoingMessage, Templates
from notifier.errors import ConfigError

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
    message = compose(Templates.load(None, product_name="Acme"))
    assert message.subject == "Confirm your email address for Acme"
    for body in (message.text, message.html):
        assert "bob@example.com" in body
        assert "sign-up" in body  # the purpose signup, in English words
        assert "60 minutes" in body
        assert "2025-06-01 12:00 UTC" in body
        assert "Acme" in body
        assert "$" not in body
    assert "https://app.example.com/verify?token=abc&x=1" in message.text


def test_a_send_soon_after_the_request_states_the_configured_lifetime() -> None:
    # Queued for 90 seconds: the link was issued for an hour, and the email says so.
    issued = NOW - timedelta(seconds=90)
    message = compose(
        Templates.load(None), issued_at=issued, expires_at=issued + timedelta(minutes=60)
    )
    assert "valid for 60 minutes" in message.text


def test_a_late_retry_states_the_time_left_not_the_whole_lifetime() -> None:
    issued = NOW - timedelta(minutes=30)
    message = compose(
        Templates.load(None), issued_at=issued, expires_at=issued + timedelta(minutes=60)
    )
    assert "valid for 30 minutes" in message.text


def test_expiry_is_never_stated_as_zero_or_negative() -> None:
    message = compose(Templates.load(None), expires_at=NOW - timedelta(minutes=5))
    assert "valid for 1 minute " in message.text
    assert "$expires_minutes" not in message.text


def test_long_lifetimes_are_stated_in_hours_and_days_in_the_emails_language() -> None:
    templates = Templates.load(None)
    day = compose(templates, issued_at=NOW, expires_at=NOW + timedelta(hours=24))
    week = compose(templates, issued_at=NOW, expires_at=NOW + timedelta(days=7))
    german = compose(templates, issued_at=NOW, expires_at=NOW + timedelta(hours=24), locale="de")
    assert "valid for 24 hours" in day.text
    assert "valid for 7 days" in week.text
    assert "24 Stunden gültig" in german.text


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
    assert parsed["From"] == "notifier <noreply@example.com>"
    assert parsed["To"] == "bob@example.com"
    assert parsed["Subject"] == "Confirm your email address for notifier"
    assert parsed["Auto-Submitted"] == "auto-generated"
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
    assert message.subject == "Confirm your email address for notifier"
    assert "<a href=" in message.html


def test_from_env_reads_the_template_directory(tmp_path: Path) -> None:
    (tmp_path / "subject.txt").write_text("Verify for $purpose")
    templates = Templates.from_env({TEMPLATE_DIR_VARIABLE: str(tmp_path)})
    assert compose(templates).subject == "Verify for sign-up"
    assert compose(Templates.from_env({})).subject == "Confirm your email address for notifier"


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


def test_locale_directory_without_any_template_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "de").mkdir()
    (tmp_path / "de" / "subject.text").write_text("misspelt")
    with pytest.raises(ConfigError, match=r"de holds none of"):
        Templates.load(tmp_path)


def test_subdirectory_not_named_for_a_locale_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "german templates").mkdir()
    (tmp_path / "german templates" / "subject.txt").write_text("x")
    with pytest.raises(ConfigError, match="not named for a locale"):
        Templates.load(tmp_path)


def test_unknown_variable_in_a_locale_override_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "fr").mkdir()
    (tmp_path / "fr" / "body.txt").write_text("Bonjour $prenom, $link")
    with pytest.raises(ConfigError, match=r"unknown variable\(s\) \$prenom"):
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


def headers_and_bodies(raw: bytes) -> tuple[dict[str, object], tuple[str, str]]:
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    keys = ("To", "Subject", "Message-ID", "Date", "Auto-Submitted", "MIME-Version")
    headers: dict[str, object] = {k: str(parsed[k]) for k in keys}
    # The sender as a reader's client shows it: display name and address, however quoted.
    headers["From"] = [(a.display_name, a.addr_spec) for a in parsed["From"].addresses]
    return headers, bodies(parsed)


@pytest.mark.parametrize(
    ("subject", "sender_name"),
    [
        ("Confirm your email address", ""),
        ("Confirm your email address", "Acme"),
        ("Bestätigen Sie Ihre Adresse ✓", 'Acme, Inc. ("the" shop)'),
        ("x" * 1200, "Zürcher Bäckerei ✓ " * 5),
    ],
)
def test_fast_bytes_say_what_the_email_package_would(subject: str, sender_name: str) -> None:
    message = compose(Templates.load(None), link="https://a.example/verify?token=t." + "Z" * 43)
    message = OutgoingMessage(
        message.message_id,
        message.sender,
        message.recipient,
        subject,
        message.text + "\n.\nFrom here\n  trailing spaces  \n" + "long " * 60,
        message.html,
        message.date,
        sender_name,
    )
    fast = headers_and_bodies(message.to_bytes())
    slow = headers_and_bodies(message.to_email().as_bytes())
    assert fast == slow
    # The sender is folded by the email package on both paths, byte for byte.
    from_line = re.compile(rb"^From: .*?\r\n(?! )", re.MULTILINE | re.DOTALL)
    fast_from = from_line.search(message.to_bytes())
    slow_from = from_line.search(message.to_email().as_bytes())
    assert fast_from and slow_from and fast_from.group(0) == slow_from.group(0)


def test_fast_bytes_keep_every_line_short_and_crlf_terminated() -> None:
    raw = compose(Templates.load(None), purpose="signup").to_bytes()
    lines = raw.split(b"\r\n")
    assert b"\n" not in b"".join(lines) and b"\r" not in b"".join(lines)
    assert max(len(line) for line in lines) <= 998
    assert raw.isascii()


def transfer_encodings(raw: bytes) -> list[str]:
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    return [str(part["Content-Transfer-Encoding"]) for part in parsed.iter_parts()]


def test_an_ascii_body_in_short_lines_goes_out_as_it_is() -> None:
    message = compose(Templates.load(None))
    raw = message.to_bytes()
    assert transfer_encodings(raw) == ["7bit", "7bit"]
    assert b"https://app.example.com/verify?token=abc&x=1\r\n" in raw  # not encoded at all


@pytest.mark.parametrize(
    "extra",
    ["Grüße ✓", "x" * 1200, "nul\0here"],
    ids=["not ascii", "a line over 998 octets", "a NUL"],
)
def test_any_other_body_goes_out_quoted_printable_and_reads_the_same(extra: str) -> None:
    message = compose(Templates.load(None))
    message = OutgoingMessage(
        message.message_id,
        message.sender,
        message.recipient,
        message.subject,
        message.text + extra + "\n",
        message.html,
        message.date,
    )
    raw = message.to_bytes()
    assert transfer_encodings(raw) == ["quoted-printable", "7bit"]
    assert raw.isascii() and max(len(line) for line in raw.split(b"\r\n")) <= 998
    text, _ = headers_and_bodies(raw)[1]
    assert text.replace("\r\n", "\n") == message.text


def test_from_header_carries_the_senders_display_name() -> None:
    templates = Templates.load(None, product_name="Acme", sender_name="Acme Accounts")
    parsed = parse(compose(templates, sender="noreply@acme.test"))
    assert parsed["From"] == "Acme Accounts <noreply@acme.test>"


def test_sender_name_defaults_to_the_product_name() -> None:
    parsed = parse(compose(Templates.load(None, product_name="Acme"), sender="noreply@acme.test"))
    assert parsed["From"].addresses[0].display_name == "Acme"


def test_non_ascii_sender_name_is_encoded_and_the_bytes_stay_ascii() -> None:
    templates = Templates.load(None, product_name="Bäckerei Zürich")
    raw = compose(templates).to_bytes()
    assert raw.isascii()
    assert b"From: =?utf-8?" in raw
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert parsed["From"].addresses[0].display_name == "Bäckerei Zürich"


def test_html_part_declares_its_language_charset_and_viewport() -> None:
    english = compose(Templates.load(None)).html
    german = compose(Templates.load(None), locale="de").html
    assert '<html lang="en"' in english and '<html lang="de"' in german
    for html in (english, german):
        assert '<meta charset="utf-8">' in html
        assert '<meta name="viewport"' in html
        assert '<meta name="color-scheme" content="light dark">' in html


def test_html_part_has_a_button_a_fallback_link_and_a_preheader() -> None:
    html = compose(Templates.load(None, product_name="Acme")).html
    link = 'href="https://app.example.com/verify?token=abc&amp;x=1"'
    # The button, and the same link again written out for clients that break buttons.
    assert html.count(link) == 2
    assert 'bgcolor="#2459c4"' in html and 'role="presentation"' in html
    assert ">https://app.example.com/verify?token=abc&amp;x=1</a>" in html
    preheader = html.split('<div style="display:none;', 1)[1].split("</div>", 1)[0]
    assert "Confirm bob@example.com for Acme" in preheader


def test_a_requests_locale_picks_its_language_and_falls_back_to_english() -> None:
    templates = Templates.load(None)
    assert compose(templates, locale="de").subject.startswith("Bestätigen Sie")
    assert compose(templates, locale="de-AT").subject.startswith("Bestätigen Sie")
    assert compose(templates, locale="ja").subject.startswith("Confirm your email")
    assert compose(templates, locale=None).subject.startswith("Confirm your email")


def test_every_shipped_language_puts_the_link_in_both_bodies() -> None:
    templates = Templates.load(None)
    assert set(templates.locales) >= {"en", "de"}
    for locale in templates.locales:
        message = compose(templates, locale=locale)
        assert "https://app.example.com/verify?token=abc&x=1" in message.text, locale
        assert 'href="https://app.example.com/verify?token=abc&amp;x=1"' in message.html, locale


def test_a_locale_override_directory_replaces_that_language_only(tmp_path: Path) -> None:
    (tmp_path / "de").mkdir()
    (tmp_path / "de" / "subject.txt").write_text("Bitte bestätigen: $product_name")
    templates = Templates.load(tmp_path, product_name="Acme")
    german = compose(templates, locale="de")
    assert german.subject == "Bitte bestätigen: Acme"
    assert "Der Link ist 60 Minuten gültig" in german.text  # the shipped German body
    assert compose(templates, locale="en").subject == "Confirm your email address for Acme"


def test_a_new_language_borrows_the_english_files_it_lacks(tmp_path: Path) -> None:
    (tmp_path / "body.txt").write_text("Open $link\n")
    (tmp_path / "pt_BR").mkdir()
    (tmp_path / "pt_BR" / "subject.txt").write_text("Confirme seu e-mail")
    templates = Templates.load(tmp_path)
    message = compose(templates, locale="pt-BR")
    assert message.subject == "Confirme seu e-mail"
    assert message.text == "Open https://app.example.com/verify?token=abc&x=1\n"
    assert '<html lang="en"' in message.html


def test_from_env_reads_the_product_and_sender_names() -> None:
    templates = Templates.from_env(
        {"NOTIFIER_PRODUCT_NAME": "Acme", "NOTIFIER_MAIL_FROM_NAME": "Acme Support"}
    )
    assert templates.product_name == "Acme" and templates.sender_name == "Acme Support"


def test_every_template_variable_is_documented_in_the_readme() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for variable in VARIABLES:
        assert f"`${variable}`" in readme, variable


def test_non_ascii_addresses_go_through_the_email_package_with_smtputf8() -> None:
    message = compose(Templates.load(None), recipient="jösé@exämple.com")
    parsed = email.message_from_bytes(message.to_bytes(), policy=email.policy.SMTPUTF8)
    assert str(parsed["To"]) == "jösé@exämple.com"


def test_expiry_line_states_the_hour_not_the_seconds_lost_before_sending() -> None:
    # Sent two seconds after an hour-long link was issued: the reader is told an hour.
    message = compose(Templates.load(None), expires_at=NOW + timedelta(minutes=60, seconds=-2))
    for body in (message.text, message.html):
        assert "60 minutes" in body
        assert "59 minutes" not in body


def test_expiry_line_of_a_one_minute_link_says_one_minute() -> None:
    message = compose(Templates.load(None), expires_at=NOW + timedelta(seconds=58))
    for body in (message.text, message.html):
        assert "1 minute" in body
        assert "0 minutes" not in body and "1 minutes" not in body


QUOTED_PRINTABLE_CASES = [
    "",
    "\n",
    "a\n\n\nb",
    ".",
    "trailing space \nand tab\t",
    "=" * 200,
    "x" * 75 + " ",
    "x" * 76,
    "x" * 77 + "\r\n" + "y" * 300,
    "bare\rcarriage returns\r\r\n",
    "Grüße, € and ünïcödé on a line long enough to be folded by the encoder " * 3,
]


@pytest.mark.parametrize("text", QUOTED_PRINTABLE_CASES)
def test_bodies_are_encoded_line_by_line_exactly_as_the_whole_text_would_be(text: str) -> None:
    # The body is encoded one cached line at a time; the bytes must be those of encoding
    # the whole text at once with CRLF line ends.
    from notifier.delivery.messages import _quoted_printable

    whole = text.replace("\r\n", "\n").replace("\r", "\n")
    if not whole.endswith("\n"):
        whole += "\n"
    expected = binascii.b2a_qp(whole.encode("utf-8"), istext=True).replace(b"\n", b"\r\n")
    assert _quoted_printable(text) == expected


def test_shipped_template_bodies_are_encoded_exactly_as_the_whole_text_would_be() -> None:
    from notifier.delivery.messages import _quoted_printable

    for chosen in Templates.load(None).sets.values():
        for method in chosen.methods.values():
            for body in (method.text.template, method.html.template):
                whole = body if body.endswith("\n") else body + "\n"
                expected = binascii.b2a_qp(whole.encode("utf-8"), istext=True)
                assert _quoted_printable(body) == expected.replace(b"\n", b"\r\n"), chosen.locale


# -- a code's email ------------------------------------------------------------------------------


def test_a_code_email_shows_the_code_grouped_in_both_parts_and_no_link() -> None:
    message = compose(
        Templates.load(None),
        method="code",
        code="042917",
        code_expires_at=NOW + timedelta(minutes=10),
        issued_at=NOW,
    )
    for body in (message.text, message.html):
        assert "042 917" in body and "verify?token" not in body
        assert "10 minutes" in body
    assert "042" not in message.subject


def test_a_link_and_code_email_has_both() -> None:
    message = compose(Templates.load(None), method="link_and_code", code="123456")
    for body in (message.text, message.html):
        assert "123 456" in body and "verify?token=abc" in body


def test_a_link_email_has_no_code_even_when_one_is_given() -> None:
    message = compose(Templates.load(None), code="123456")
    for body in (message.text, message.html):
        assert "123 456" not in body and "123456" not in body


def test_a_code_email_without_its_code_is_refused() -> None:
    with pytest.raises(ValueError, match="needs its code"):
        compose(Templates.load(None), method="code")


@pytest.mark.parametrize(("name", "variable"), [("code-body.txt", "$link"), ("body.txt", "$code")])
def test_a_variable_of_another_method_in_an_override_is_a_config_error(
    tmp_path: Path, name: str, variable: str
) -> None:
    (tmp_path / name).write_text(f"Here: {variable}\n")
    with pytest.raises(ConfigError, match="unknown variable"):
        Templates.load(tmp_path)


def test_the_german_code_email_is_german() -> None:
    message = compose(Templates.load(None), method="code", code="123456", locale="de")
    assert message.subject.startswith("Ihr Bestätigungscode")
    assert "geben Sie diesen Code" in message.text


@pytest.mark.parametrize(
    "source",
    ["Hi $name, ${name}s cost $$5; $missing stays", "", "$name$name", "a $$ b $", "${missing}"],
)
def test_a_filled_template_reads_exactly_as_safe_substitute_would(source: str) -> None:
    from string import Template

    from notifier.delivery.messages import Filled

    values = {"name": "Ada"}
    assert Filled(source).fill(values) == Template(source).safe_substitute(values)


def test_every_shipped_template_fills_as_safe_substitute_would() -> None:
    values = {name: f"<{name}>" for name in VARIABLES}
    for template_set in Templates.load(None).sets.values():
        for method in template_set.methods.values():
            for part in (method.subject, method.text, method.html):
                assert part.fill(values) == part.safe_substitute(values)
