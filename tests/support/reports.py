"""Reports as mail systems write them: a Postfix delivery status notification and an ARF
feedback report, for a given return path and status."""

from __future__ import annotations

import uuid


def dsn(
    to: str,
    recipient: str,
    *,
    action: str = "failed",
    status: str = "5.1.1",
    diagnostic: str = "smtp; 550 5.1.1 <{recipient}>: Recipient address rejected: User unknown",
    message_id: str | None = None,
) -> bytes:
    """A multipart/report; report-type=delivery-status, as Postfix writes one."""
    boundary = "B" + uuid.uuid4().hex
    message_id = message_id or f"<{uuid.uuid4().hex}@relay.example.net>"
    return (
        f"From: MAILER-DAEMON@relay.example.net (Mail Delivery System)\r\n"
        f"To: {to}\r\n"
        f"Subject: Undelivered Mail Returned to Sender\r\n"
        f"Message-ID: {message_id}\r\n"
        f"Auto-Submitted: auto-replied\r\n"
        f"MIME-Version: 1.0\r\n"
        f'Content-Type: multipart/report; report-type=delivery-status; boundary="{boundary}"\r\n'
        f"\r\n"
        f"--{boundary}\r\n"
        f"Content-Type: text/plain; charset=us-ascii\r\n\r\n"
        f"I'm sorry to have to inform you that your message could not be delivered.\r\n\r\n"
        f"--{boundary}\r\n"
        f"Content-Type: message/delivery-status\r\n\r\n"
        f"Reporting-MTA: dns; relay.example.net\r\n"
        f"X-Postfix-Queue-ID: 4Xyz\r\n"
        f"Arrival-Date: Wed,  2 Dec 2026 04:00:00 +0000 (UTC)\r\n\r\n"
        f"Final-Recipient: rfc822; {recipient}\r\n"
        f"Original-Recipient: rfc822;{recipient}\r\n"
        f"Action: {action}\r\n"
        f"Status: {status}\r\n"
        f"Remote-MTA: dns; mx.example.org\r\n"
        f"Diagnostic-Code: {diagnostic.format(recipient=recipient)}\r\n\r\n"
        f"--{boundary}\r\n"
        f"Content-Type: text/rfc822-headers\r\n\r\n"
        f"From: noreply@app.example.com\r\nTo: {recipient}\r\nSubject: Confirm\r\n\r\n"
        f"--{boundary}--\r\n"
    ).encode()


def arf(to: str, recipient: str, *, feedback_type: str = "abuse") -> bytes:
    """A multipart/report; report-type=feedback-report (RFC 5965), as a mailbox provider's
    feedback loop sends one."""
    boundary = "F" + uuid.uuid4().hex
    return (
        f"From: fbl@isp.example.org\r\n"
        f"To: {to}\r\n"
        f"Subject: FW: Confirm your email address\r\n"
        f"Message-ID: <{uuid.uuid4().hex}@isp.example.org>\r\n"
        f"MIME-Version: 1.0\r\n"
        f'Content-Type: multipart/report; report-type=feedback-report; boundary="{boundary}"\r\n'
        f"\r\n"
        f"--{boundary}\r\n"
        f"Content-Type: text/plain\r\n\r\n"
        f"This is an email abuse report.\r\n\r\n"
        f"--{boundary}\r\n"
        f"Content-Type: message/feedback-report\r\n\r\n"
        f"Feedback-Type: {feedback_type}\r\n"
        f"User-Agent: ExampleFBL/1.0\r\n"
        f"Version: 1\r\n"
        f"Original-Rcpt-To: {recipient}\r\n\r\n"
        f"--{boundary}\r\n"
        f"Content-Type: message/rfc822\r\n\r\n"
        f"From: noreply@app.example.com\r\nTo: {recipient}\r\nSubject: Confirm\r\n\r\nbody\r\n\r\n"
        f"--{boundary}--\r\n"
    ).encode()
