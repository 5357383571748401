"""The dev inbox's store: real SMTP in, .eml files in the data directory, watchers woken."""

from __future__ import annotations

import stat
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path

import aiosmtplib
import anyio
import pytest

from notifier.delivery.messages import Templates
from notifier.dev.inbox import PREVIEW_CHARS, SEARCHED_TEXT_CHARS, Inbox
from notifier.outcomes import Method

pytestmark = pytest.mark.anyio

LINK = "http://127.0.0.1:8000/verify?token=k1.abcDEF_-123"


def message(
    to: str, subject: str = "Confirm your email address", text: str = f"Open {LINK}\n"
) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = "Acme <noreply@acme.test>"
    mail["To"] = to
    mail["Subject"] = subject
    mail["Message-ID"] = f"<{subject.replace(' ', '.')}.{to}>"
    mail.set_content(text)
    mail.add_alternative(f'<p><a href="{LINK}">Confirm</a></p>', subtype="html")
    return mail


@pytest.fixture
async def inbox(tmp_path: Path) -> AsyncIterator[Inbox]:
    inbox = Inbox(tmp_path / "inbox")
    await inbox.start()
    try:
        yield inbox
    finally:
        await inbox.stop()


async def send(inbox: Inbox, *mails: EmailMessage) -> None:
    assert inbox.port is not None
    async with aiosmtplib.SMTP(hostname="127.0.0.1", port=inbox.port) as smtp:
        for mail in mails:
            await smtp.send_message(mail)


async def test_received_mail_is_listed_with_its_link_and_parts(inbox: Inbox) -> None:
    await send(inbox, message("ada@example.com"))
    [captured] = inbox.messages
    assert captured.recipients == ("ada@example.com",)
    assert captured.sender == "Acme <noreply@acme.test>"
    assert (captured.subject, captured.link, captured.has_html) == (
        "Confirm your email address",
        LINK,
        True,
    )
    opened = inbox.open(captured.number)
    assert opened is not None
    assert opened.text == f"Open {LINK}\n"
    assert opened.html is not None and f'href="{LINK}"' in opened.html
    assert ("Delivered-To", "ada@example.com") in opened.headers


@pytest.mark.parametrize(
    ("method", "code", "has_link"),
    [("code", "042 917", False), ("link_and_code", "042 917", True), ("link", None, True)],
)
async def test_the_code_a_shipped_template_carries_is_found_and_shown_as_written(
    inbox: Inbox, method: Method, code: str | None, has_link: bool
) -> None:
    now = datetime.now(UTC)
    composed = Templates.load(None).compose(
        message_id="<verify.1@acme.test>",
        sender="noreply@acme.test",
        recipient="ada@example.com",
        link=LINK,
        expires_at=now + timedelta(hours=1),
        purpose="signup",
        now=now,
        method=method,
        code="042917",
        code_expires_at=now + timedelta(minutes=10),
    )
    assert inbox.port is not None
    async with aiosmtplib.SMTP(hostname="127.0.0.1", port=inbox.port) as smtp:
        await smtp.sendmail("noreply@acme.test", ["ada@example.com"], composed.to_bytes())
    [captured] = inbox.messages
    assert (captured.code, captured.link is not None) == (code, has_link)


async def test_messages_survive_a_restart_in_the_same_directory(
    inbox: Inbox, tmp_path: Path
) -> None:
    await send(inbox, message("ada@example.com"), message("grace@example.com"))
    await inbox.stop()
    again = Inbox(tmp_path / "inbox")
    assert [m.recipients for m in again.messages] == [("grace@example.com",), ("ada@example.com",)]
    assert [m.number for m in again.messages] == [m.number for m in inbox.messages]
    opened = again.open(again.messages[0].number)
    assert opened is not None and opened.text == f"Open {LINK}\n"


async def test_only_the_newest_messages_are_kept(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox", capacity=3)
    await inbox.start()
    try:
        await send(inbox, *(message(f"u{i}@example.com") for i in range(5)))
    finally:
        await inbox.stop()
    assert [m.recipients[0] for m in inbox.messages] == [f"u{i}@example.com" for i in (4, 3, 2)]
    assert len(list((tmp_path / "inbox").glob("*.eml"))) == 3
    assert len(Inbox(tmp_path / "inbox", capacity=2).messages) == 2


async def test_delete_all_empties_it_and_numbers_are_never_reused(
    inbox: Inbox, tmp_path: Path
) -> None:
    await send(inbox, message("ada@example.com"), message("grace@example.com"))
    highest = inbox.messages[0].number
    assert inbox.clear() == 2
    assert inbox.messages == [] and not list((tmp_path / "inbox").glob("*.eml"))
    await send(inbox, message("linus@example.com"))
    assert inbox.messages[0].number == highest + 1
    assert inbox.find(highest) is None
    # After a restart too: an old link to /dev/inbox/N never shows another message.
    assert Inbox(tmp_path / "inbox").messages[0].number == highest + 1


async def test_search_matches_part_of_a_recipient_or_sender_ignoring_case(inbox: Inbox) -> None:
    await send(inbox, message("ada@example.com"), message("Grace@Example.org"))
    assert [m.recipients for m in inbox.search("GRACE")] == [("Grace@Example.org",)]
    assert len(inbox.search("example")) == 2
    assert len(inbox.search("acme.test")) == 2
    assert inbox.search("nobody") == []


async def test_search_matches_the_subject_and_the_text_ignoring_case(inbox: Inbox) -> None:
    await send(inbox, message("ada@example.com", "Welcome aboard"), message("grace@example.org"))
    assert [m.subject for m in inbox.search("WELCOME")] == ["Welcome aboard"]
    assert len(inbox.search("token=k1.abcdef")) == 2  # in the text part of both


async def test_search_looks_no_further_than_the_start_of_a_long_text(inbox: Inbox) -> None:
    await send(inbox, message("ada@example.com", text="x" * SEARCHED_TEXT_CHARS + " needle"))
    assert inbox.search("needle") == []
    assert len(inbox.search("xxx")) == 1


async def test_the_list_carries_a_one_line_preview_of_the_text(inbox: Inbox) -> None:
    text = "Hello Ada,\n\n  confirm   your address.\n" + "more " * 100
    await send(inbox, message("ada@example.com", text=text))
    [captured] = inbox.messages
    assert captured.preview.startswith("Hello Ada, confirm your address. more")
    assert len(captured.preview) == PREVIEW_CHARS


async def test_deleting_one_message_leaves_the_others_and_its_number_unused(
    inbox: Inbox, tmp_path: Path
) -> None:
    await send(inbox, message("ada@example.com"), message("grace@example.com"))
    newest, oldest = inbox.messages
    assert inbox.delete(oldest.number)
    assert [m.number for m in inbox.messages] == [newest.number]
    assert len(list((tmp_path / "inbox").glob("*.eml"))) == 1
    assert not inbox.delete(oldest.number)  # gone: a second delete finds nothing
    await send(inbox, message("linus@example.com"))
    assert inbox.messages[0].number == newest.number + 1


async def test_a_message_is_found_by_its_message_id_with_or_without_brackets(
    inbox: Inbox,
) -> None:
    await send(inbox, message("ada@example.com"), message("grace@example.com"))
    wanted = inbox.messages[1]
    assert inbox.find_by_message_id(wanted.message_id) == wanted
    assert inbox.find_by_message_id(wanted.message_id.strip("<>")) == wanted
    assert inbox.find_by_message_id("<nobody@x>") is None


async def test_notifiers_message_id_names_its_verification(inbox: Inbox) -> None:
    mail = message("ada@example.com")
    del mail["Message-ID"]
    mail["Message-ID"] = "<verify.0B7E3C52-6F1A-4C53-9D55-3A0A7A1F6B2E@notifier.localhost>"
    await send(inbox, mail, message("grace@example.com"))
    grace, ada = inbox.messages
    assert ada.verification_id == "0b7e3c52-6f1a-4c53-9d55-3a0a7a1f6b2e"
    assert grace.verification_id is None


async def test_watchers_are_woken_by_each_change_and_released_by_close(inbox: Inbox) -> None:
    seen = inbox.version
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            woken: list[int] = []

            async def watch() -> None:
                woken.append(await inbox.wait_beyond(seen))

            tg.start_soon(watch)
            await send(inbox, message("ada@example.com"))
        assert woken == [seen + 1]
        inbox.clear()
        assert await inbox.wait_beyond(seen + 1) == seen + 2
        inbox.close()
        assert await inbox.wait_beyond(inbox.version) == inbox.version


async def test_kept_messages_are_readable_by_their_owner_only(inbox: Inbox, tmp_path: Path) -> None:
    await send(inbox, message("ada@example.com"))
    directory = tmp_path / "inbox"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for file in directory.glob("*.eml"):
        assert stat.S_IMODE(file.stat().st_mode) == 0o600


async def test_a_malformed_message_is_kept_and_listed_without_breaking_the_inbox(
    inbox: Inbox, tmp_path: Path
) -> None:
    assert inbox.port is not None
    async with aiosmtplib.SMTP(hostname="127.0.0.1", port=inbox.port) as smtp:
        garbage = b"Subject: =?utf-8?q?broken\r\nContent-Type: multipart/mixed\r\n\r\n\xff\xfe\r\n"
        await smtp.sendmail("x@example.com", ["ada@example.com"], garbage)
    [captured] = inbox.messages
    assert captured.recipients == ("ada@example.com",) and captured.link is None
    assert inbox.open(captured.number) is not None
    assert len(Inbox(tmp_path / "inbox").messages) == 1
