"""The delivery console over a real pool: who may use it, what it shows, what its forms do.

Pages are read as HTML by an in-process client; the browser tests (tests/acceptance/
test_console.py) walk the same pages in Chromium.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import AsyncIterator
from html import unescape

import anyio
import asyncpg
import httpx
import pytest

from notifier import apikeys, events
from notifier.runner import internal_app
from notifier.storage import codes
from notifier.storage.drivers import CatalogueRunner
from notifier.storage.outbox import request_standalone
from notifier.storage.queries import sql
from notifier.tokens import TokenKeys
from notifier.web.access import CSRF_FIELD, SESSION_COOKIE
from notifier.web.access import routes as access_routes
from notifier.web.listeners import Services
from tests.support.apps import INTERNAL_BASE, bearer, make_key
from tests.support.deliveries import code_of, enqueue, policy_for_tests
from tests.support.recorder import recorded
from tests.support.smtp_server import Fault, SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
# What Chromium sends with a form posted from one of the console's own pages.
SAME_SITE_FORM = {**BROWSER, "Sec-Fetch-Site": "same-origin"}
TRACE_URL = "http://jaeger.test:16686/trace/{trace_id}"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
WAIT = 10


@pytest.fixture
async def services(pool: asyncpg.Pool, keys: TokenKeys) -> Services:
    return Services.over(pool, policy_for_tests(keys))


@pytest.fixture
async def console(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    """The internal app with a trace URL, and no key: each test signs in or sends one."""
    app = internal_app(services, trace_url=TRACE_URL)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=INTERNAL_BASE
    ) as client:
        yield client


async def signed_in(client: httpx.AsyncClient, key: str) -> None:
    response = await client.post(
        "/sign-in", data={"key": key, "next": "/console"}, headers=SAME_SITE_FORM
    )
    assert response.status_code == 303, response.text


def csrf_of(page: str) -> str:
    found = re.search(rf'name="{CSRF_FIELD}" value="([^"]+)"', page)
    assert found, "the page has no form with a CSRF token"
    return unescape(found.group(1))


async def suppress(db: asyncpg.Connection, mailbox: str) -> None:
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason, smtp_code) "
        "VALUES ($1, '550 5.1.1 user unknown', 550)",
        mailbox,
    )


async def suppressed(db: asyncpg.Connection) -> list[str]:
    rows = await db.fetch("SELECT email FROM notifier.suppressed_addresses ORDER BY email")
    return [r["email"] for r in rows]


# -- who may use it -----------------------------------------------------------------------------


async def test_reading_the_console_needs_read_and_changing_anything_needs_admin(
    services: Services,
) -> None:
    declared = {
        (method, route.path): route.access
        for route in access_routes(internal_app(services))
        for method in route.methods
        if route.path == "/" or route.path.startswith("/console")
    }
    assert declared == {
        ("GET", "/"): "read",
        ("GET", "/console"): "read",
        ("GET", "/console/deliveries"): "read",
        ("GET", "/console/deliveries/{verification_id}"): "read",
        ("POST", "/console/deliveries/{verification_id}/resend"): "admin",
        ("GET", "/console/suppressions"): "read",
        ("POST", "/console/suppressions/clear"): "admin",
        ("GET", "/console/static/console.css"): "read",
        ("GET", "/console/webhooks"): "read",
        ("GET", "/console/webhooks/{endpoint_id}"): "read",
        ("POST", "/console/webhooks/deliveries/{delivery_id}/replay"): "admin",
    }


async def test_a_browser_that_is_not_signed_in_gets_the_sign_in_form_leading_back(
    console: httpx.AsyncClient,
) -> None:
    response = await console.get("/console/deliveries?q=ada%40example.com", headers=BROWSER)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert 'action="/sign-in"' in response.text
    assert 'name=next value="/console/deliveries?q=ada%40example.com"' in response.text


async def test_an_api_client_that_is_not_signed_in_still_gets_json(
    console: httpx.AsyncClient,
) -> None:
    response = await console.get("/console")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


async def test_the_console_refuses_a_key_without_the_read_scope(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    await signed_in(console, await make_key(db, ["metrics", "request"], name="scraper"))
    response = await console.get("/console", headers=BROWSER)
    assert response.status_code == 403
    assert 'scope="read"' in response.headers["WWW-Authenticate"]
    assert "The key you signed in with (scraper) lacks the “read” scope" in response.text
    assert 'action="/sign-in"' in response.text


async def test_signing_in_from_a_refused_page_comes_back_to_it(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    key = await make_key(db, ["read"])
    response = await console.post(
        "/sign-in",
        data={"key": key, "next": "/console/suppressions?q=a%40b.example"},
        headers=SAME_SITE_FORM,
    )
    assert response.headers["Location"] == "/console/suppressions?q=a%40b.example"


async def test_a_read_only_key_sees_no_clear_button_and_cannot_clear(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    await suppress(db, "gone@example.com")
    await signed_in(console, await make_key(db, ["read"]))
    page = await console.get("/console/suppressions?q=gone@example.com", headers=BROWSER)
    assert "This address is suppressed" in page.text
    assert "Clear the suppression" not in page.text
    assert "needs a key with the admin scope" in page.text
    posted = await console.post(
        "/console/suppressions/clear",
        data={"address": "gone@example.com", CSRF_FIELD: csrf_of(page.text)},
        headers=SAME_SITE_FORM,
    )
    assert posted.status_code == 403
    assert await suppressed(db) == ["gone@example.com"]


# -- forms and CSRF -----------------------------------------------------------------------------


async def admin_page(console: httpx.AsyncClient, db: asyncpg.Connection) -> str:
    """Signed in with an admin key, the suppression check page of gone@example.com."""
    await suppress(db, "gone@example.com")
    await signed_in(console, await make_key(db, ["read", "admin"]))
    page = await console.get("/console/suppressions?q=gone@example.com", headers=BROWSER)
    assert page.status_code == 200
    return page.text


async def test_a_signed_in_form_with_its_pages_csrf_token_clears_a_suppression(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    page = await admin_page(console, db)
    posted = await console.post(
        "/console/suppressions/clear",
        data={"address": "Gone@Example.com", CSRF_FIELD: csrf_of(page)},
        headers=SAME_SITE_FORM,
    )
    assert posted.status_code == 303
    assert posted.headers["Location"] == "/console/suppressions?notice=cleared"
    assert await suppressed(db) == []
    after = await console.get(posted.headers["Location"], headers=BROWSER)
    assert "The suppression was cleared" in after.text


@contextlib.asynccontextmanager
async def signed_in_browser(services: Services, key: str) -> AsyncIterator[httpx.AsyncClient]:
    """Another browser (its own cookie jar) signed in to the console with `key`."""
    app = internal_app(services, trace_url=TRACE_URL)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=INTERNAL_BASE
    ) as client:
        await signed_in(client, key)
        yield client


async def test_signing_out_ends_this_session_wherever_its_cookie_was_copied(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    await signed_in(console, await make_key(db, ["read"]))
    page = await console.get("/console", headers=BROWSER)
    cookie = console.cookies[SESSION_COOKIE]
    out = await console.post(
        "/sign-out", data={CSRF_FIELD: csrf_of(page.text)}, headers=SAME_SITE_FORM
    )
    assert out.status_code == 303
    console.cookies.clear()
    console.cookies.set(SESSION_COOKIE, cookie)
    assert (await console.get("/console", headers=BROWSER)).status_code == 401


async def test_signing_out_leaves_a_colleague_signed_in_with_the_same_key_alone(
    console: httpx.AsyncClient, db: asyncpg.Connection, services: Services
) -> None:
    key = await make_key(db, ["read"], name="support desk")
    await signed_in(console, key)
    async with signed_in_browser(services, key) as colleague:
        page = await console.get("/console", headers=BROWSER)
        out = await console.post(
            "/sign-out", data={CSRF_FIELD: csrf_of(page.text)}, headers=SAME_SITE_FORM
        )
        assert out.status_code == 303
        assert (await colleague.get("/console", headers=BROWSER)).status_code == 200


@pytest.mark.parametrize(
    "forged",
    [
        pytest.param({"headers": SAME_SITE_FORM, "data": {}}, id="without the token"),
        pytest.param(
            {"headers": {**BROWSER, "Sec-Fetch-Site": "same-site"}, "data": None},
            id="from a sibling subdomain",
        ),
        pytest.param(
            {"headers": {**BROWSER, "Origin": "http://127.0.0.1:9999"}, "data": None},
            id="from another port",
        ),
    ],
)
async def test_another_site_cannot_sign_a_browser_out(
    console: httpx.AsyncClient, db: asyncpg.Connection, forged: dict[str, object]
) -> None:
    await signed_in(console, await make_key(db, ["read"]))
    page = await console.get("/console", headers=BROWSER)
    data = forged["data"] if forged["data"] is not None else {CSRF_FIELD: csrf_of(page.text)}
    headers = forged["headers"]
    assert isinstance(data, dict) and isinstance(headers, dict)
    refused = await console.post("/sign-out", data=data, headers=headers)
    assert refused.status_code == 403
    assert (await console.get("/console", headers=BROWSER)).status_code == 200


async def test_a_signed_in_post_without_a_csrf_token_is_refused_and_changes_nothing(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    await admin_page(console, db)
    posted = await console.post(
        "/console/suppressions/clear", data={"address": "gone@example.com"}, headers=SAME_SITE_FORM
    )
    assert posted.status_code == 403 and "This form was refused" in posted.text
    assert await suppressed(db) == ["gone@example.com"]


async def test_a_csrf_token_of_another_session_is_refused(
    console: httpx.AsyncClient, db: asyncpg.Connection, services: Services
) -> None:
    await admin_page(console, db)
    other_session = services.sessions.issue(apikeys.parse(await make_key(db)).id)
    posted = await console.post(
        "/console/suppressions/clear",
        data={
            "address": "gone@example.com",
            CSRF_FIELD: services.sessions.csrf_token(other_session),
        },
        headers=SAME_SITE_FORM,
    )
    assert posted.status_code == 403
    assert await suppressed(db) == ["gone@example.com"]


async def test_a_form_from_another_site_is_refused_even_with_the_token(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    page = await admin_page(console, db)
    posted = await console.post(
        "/console/suppressions/clear",
        data={"address": "gone@example.com", CSRF_FIELD: csrf_of(page)},
        headers={**BROWSER, "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
    )
    assert posted.status_code == 403
    assert await suppressed(db) == ["gone@example.com"]


async def test_a_csrf_failure_answers_an_api_client_in_json(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    await admin_page(console, db)
    posted = await console.post("/console/suppressions/clear", data={"address": "x@example.com"})
    assert posted.status_code == 403 and posted.json()["error"]["code"] == "csrf_failed"


async def test_a_bearer_key_needs_no_csrf_token(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    await suppress(db, "gone@example.com")
    posted = await console.post(
        "/console/suppressions/clear",
        data={"address": "gone@example.com"},
        headers=bearer(await make_key(db, ["admin"])),
    )
    assert posted.status_code == 303 and await suppressed(db) == []


async def test_a_session_cookie_that_is_not_ascii_is_refused_not_an_error(
    console: httpx.AsyncClient, services: Services
) -> None:
    kid, issued = services.policy.keys.current_key_id, round(time.time() * 1000)
    # Unexpired and signed by a configured secret, as far as its shape says.
    cookie = f"{SESSION_COOKIE}=abc.{issued}.{kid}.\u00ff".encode("latin-1")
    response = await console.get("/console", headers=[(b"Cookie", cookie)])
    assert response.status_code == 401


# -- what it shows ------------------------------------------------------------------------------


async def test_search_finds_every_spelling_of_a_mailbox_and_shows_it_redacted(
    console: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    await enqueue(db, keys, "Ada.Lovelace+signup@Example.com", user_id="ada")
    await enqueue(db, keys, "someone.else@example.com")
    headers = bearer(await make_key(db, ["read"]))
    page = await console.get("/console/deliveries?q=ada.lovelace@EXAMPLE.com", headers=headers)
    assert page.status_code == 200
    assert page.text.count('class=delivery href="/console/deliveries/') == 1
    assert "A***@example.com" in page.text
    assert "Lovelace" not in page.text and "someone" not in page.text


async def test_search_by_verification_id_leads_to_its_delivery(
    console: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys, "ada@example.com")
    headers = bearer(await make_key(db, ["read"]))
    found = await console.get(f"/console/deliveries?q={enqueued.id}", headers=headers)
    missing = await console.get(f"/console/deliveries?q={uuid.uuid4()}", headers=headers)
    assert found.status_code == 303
    assert found.headers["Location"] == f"/console/deliveries/{enqueued.id}"
    assert "No delivery has that verification id" in missing.text


async def test_a_search_that_is_neither_an_address_nor_an_id_says_so(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    headers = bearer(await make_key(db, ["read"]))
    page = await console.get("/console/deliveries?q=ada", headers=headers)
    assert "Type a whole email address or a verification id" in page.text


async def test_a_delivery_shows_its_attempt_timeline_and_never_its_token_or_address(
    console: httpx.AsyncClient,
    db: asyncpg.Connection,
    keys: TokenKeys,
    database_url: str,
    smtp_server: SmtpServer,
) -> None:
    async with running_worker(database_url, keys, smtp_server.settings(), name="worker-7") as w:
        enqueued = await enqueue(db, keys, "ada@example.com")
        with anyio.fail_after(WAIT):
            await recorded(w).wait_for_kind(events.Completed)
    [mail] = smtp_server.received
    token = re.search(rb"token=([\w.-]+)", mail.content)
    assert token
    headers = bearer(await make_key(db, ["read"]))
    page = (await console.get(f"/console/deliveries/{enqueued.id}", headers=headers)).text
    assert "Delivery to a***@example.com" in page
    assert "Attempt 1 <span class='status ok'>sent</span>" in page
    assert "<code>test:worker-7</code>" in page and "notify" in page
    assert re.search(r"Server reply</dt><dd>250 ", page)
    assert token.group(1).decode() not in page and "ada@example.com" not in page


async def test_a_code_deliverys_page_shows_its_method_wrong_codes_and_lock_never_its_code(
    console: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    policy = policy_for_tests(keys)
    result = await request_standalone(
        db, user_id="ada", email="ada@example.com", policy=policy, method="link_and_code"
    )
    code = await code_of(db, keys, result.id)
    wrong = str((int(code) + 1) % 10**6).zfill(6)
    for _ in range(5):
        await codes.check(CatalogueRunner(db), result.id, wrong, policy=policy)
    headers = bearer(await make_key(db, ["read"]))
    page = (await console.get(f"/console/deliveries/{result.id}", headers=headers)).text
    assert "<dt>Method</dt><dd>link or code</dd>" in page
    assert "<dt>Wrong codes</dt><dd>5: <strong>locked</strong>" in page
    assert "its link still works" in page
    assert code not in page and f"{code[:3]} {code[3:]}" not in page


async def test_the_trace_id_links_to_the_configured_trace_viewer(
    console: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys, "ada@example.com")
    await db.execute(
        "UPDATE notifier.email_outbox SET traceparent = $1 WHERE id = $2",
        TRACEPARENT,
        enqueued.outbox_id,
    )
    headers = bearer(await make_key(db, ["read"]))
    page = (await console.get(f"/console/deliveries/{enqueued.id}", headers=headers)).text
    trace_id = TRACEPARENT.split("-")[1]
    assert f'<a href="http://jaeger.test:16686/trace/{trace_id}" rel=noreferrer>' in page


async def test_without_a_trace_url_the_trace_id_is_shown_without_a_link(
    services: Services, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys, "ada@example.com")
    await db.execute(
        "UPDATE notifier.email_outbox SET traceparent = $1 WHERE id = $2",
        TRACEPARENT,
        enqueued.outbox_id,
    )
    app = internal_app(services)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=INTERNAL_BASE
    ) as client:
        headers = bearer(await make_key(db, ["read"]))
        page = (await client.get(f"/console/deliveries/{enqueued.id}", headers=headers)).text
    assert f"<dt>Trace</dt><dd><code>{TRACEPARENT.split('-')[1]}</code></dd>" in page


async def test_queue_health_shows_the_queue_and_each_delivery_in_the_minute_it_finished(
    console: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    sent, failed, _pending = [
        await enqueue(db, keys, f"{name}@example.com") for name in ("ada", "grace", "linus")
    ]
    await db.execute(
        "UPDATE notifier.email_outbox SET status = 'sent', completed_at = now() - interval "
        "'10 minutes' WHERE id = $1",
        sent.outbox_id,
    )
    await db.execute(
        "UPDATE notifier.email_outbox SET status = 'failed', completed_at = now() WHERE id = $1",
        failed.outbox_id,
    )
    headers = bearer(await make_key(db, ["read"]))
    page = (await console.get("/console", headers=headers)).text
    figures = dict(re.findall(r"<dt>([^<]+)</dt><dd class=figure>([^<]+)</dd>", page))
    assert figures["Pending"] == "1" and figures["Sent, last hour"] == "1"
    assert figures["Failed, last hour"] == "1" and figures["Expired leases"] == "0"
    bars = re.findall(r"<g><title>([^<]+)</title>", page)
    assert len(bars) == 2
    assert bars[0].endswith("1 sent, 0 failed") and bars[1].endswith("0 sent, 1 failed")
    assert "Over the last 60 minutes: 1 sent, 1 failed" in page


async def test_the_shares_count_how_claims_found_their_rows(
    console: httpx.AsyncClient,
    db: asyncpg.Connection,
    keys: TokenKeys,
    database_url: str,
    smtp_server: SmtpServer,
) -> None:
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        for name in ("ada", "grace"):
            await enqueue(db, keys, f"{name}@example.com")
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.Completed, 2)
    headers = bearer(await make_key(db, ["read"]))
    page = (await console.get("/console", headers=headers)).text
    assert re.search(r"<th scope=row>notify<span class=why>[^<]*</span></th><td>2</td>", page)
    assert "100%" in page


# -- what its forms do --------------------------------------------------------------------------


async def failed_delivery(
    db: asyncpg.Connection,
    keys: TokenKeys,
    database_url: str,
    smtp_server: SmtpServer,
    fault: Fault,
) -> uuid.UUID:
    """A delivery to grace@example.com that the mail server made fail for real."""
    smtp_server.plan("grace@example.com", fault)
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        enqueued = await enqueue(db, keys, "grace@example.com", max_attempts=1)
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(
                lambda s: any(e.status == "failed" for e in s.of(events.Completed))
            )
    return enqueued.id


async def test_resending_a_failed_delivery_twice_requests_one_new_verification(
    console: httpx.AsyncClient,
    db: asyncpg.Connection,
    keys: TokenKeys,
    database_url: str,
    smtp_server: SmtpServer,
) -> None:
    failed = await failed_delivery(db, keys, database_url, smtp_server, Fault.RCPT_4XX)
    admin = await make_key(db, ["read", "admin"])
    await signed_in(console, admin)
    page = (await console.get(f"/console/deliveries/{failed}", headers=BROWSER)).text
    assert "Resend</button>" in page
    form = {CSRF_FIELD: csrf_of(page)}
    first = await console.post(
        f"/console/deliveries/{failed}/resend", data=form, headers=SAME_SITE_FORM
    )
    second = await console.post(
        f"/console/deliveries/{failed}/resend", data=form, headers=SAME_SITE_FORM
    )
    assert (first.status_code, second.status_code) == (303, 303)
    new_id = first.headers["Location"].split("/")[-1].split("?")[0]
    assert first.headers["Location"].endswith("?notice=resent")
    assert second.headers["Location"] == f"/console/deliveries/{new_id}?notice=already-resent"
    rows = await db.fetch(
        "SELECT id, client_id, superseded_at FROM notifier.verifications ORDER BY created_at"
    )
    assert [str(r["id"]) for r in rows] == [str(failed), new_id]
    assert rows[1]["client_id"] == apikeys.parse(admin).id and rows[0]["superseded_at"]


async def test_resending_to_a_suppressed_mailbox_sends_nothing_and_points_to_suppressions(
    console: httpx.AsyncClient,
    db: asyncpg.Connection,
    keys: TokenKeys,
    database_url: str,
    smtp_server: SmtpServer,
) -> None:
    failed = await failed_delivery(db, keys, database_url, smtp_server, Fault.RCPT_5XX)
    posted = await console.post(
        f"/console/deliveries/{failed}/resend", headers=bearer(await make_key(db))
    )
    assert posted.status_code == 409
    assert "Nothing was sent" in posted.text and 'href="/console/suppressions"' in posted.text
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 1


async def test_a_failed_delivery_to_a_suppressed_mailbox_says_so_instead_of_offering_resend(
    console: httpx.AsyncClient,
    db: asyncpg.Connection,
    keys: TokenKeys,
    database_url: str,
    smtp_server: SmtpServer,
) -> None:
    failed = await failed_delivery(db, keys, database_url, smtp_server, Fault.RCPT_5XX)
    headers = bearer(await make_key(db))
    page = (await console.get(f"/console/deliveries/{failed}", headers=headers)).text
    assert "Its address is suppressed" in page and "Resend</button>" not in page


async def test_only_a_failed_delivery_can_be_resent(
    console: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    pending = await enqueue(db, keys, "ada@example.com")
    headers = bearer(await make_key(db))
    page = (await console.get(f"/console/deliveries/{pending.id}", headers=headers)).text
    posted = await console.post(f"/console/deliveries/{pending.id}/resend", headers=headers)
    assert "Resend</button>" not in page
    assert posted.status_code == 409 and "Only a failed delivery can be resent" in posted.text
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 1


async def test_the_production_root_leads_to_the_console(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    response = await console.get("/", headers=bearer(await make_key(db, ["read"])))
    assert response.status_code == 303 and response.headers["Location"] == "/console"


async def test_console_pages_run_no_script_and_are_never_cached_or_framed(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    headers = bearer(await make_key(db, ["read"]))
    for path in ("/console", "/console/deliveries", "/console/suppressions"):
        response = await console.get(path, headers=headers)
        policy = response.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src" not in policy, path
        assert "frame-ancestors 'none'" in policy and "<script" not in response.text, path
        assert response.headers["cache-control"] == "no-store", path
    sheet = await console.get("/console/static/console.css", headers=headers)
    assert sheet.headers["content-type"].startswith("text/css") and ".tiles" in sheet.text


async def test_the_hours_figures_read_that_hours_rows_not_every_row_kept(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    # A month of retention in miniature: many deliveries that finished days ago.
    await db.execute(
        """INSERT INTO notifier.verifications (user_id, email, token_key_id, token_nonce,
                                               token_hash, expires_at, created_at)
           SELECT 'u' || g, 'u' || g || '@example.com', 'k', gen_random_uuid()::text::bytea,
                  sha256(g::text::bytea), now() - interval '2 days', now() - interval '3 days'
           FROM generate_series(1, 5000) g"""
    )
    await db.execute(
        """WITH rows AS (
               INSERT INTO notifier.email_outbox (verification_id, message_id, status, attempts,
                                                  completed_at)
               SELECT id, '<' || id || '@t>', 'sent', 1, now() - interval '2 days'
               FROM notifier.verifications
               RETURNING id
           )
           INSERT INTO notifier.delivery_attempts (outbox_id, attempt, lease_owner, lease_token,
                                                   outcome, finished_at)
           SELECT id, 1, 'w', gen_random_uuid(), 'sent', now() - interval '2 days' FROM rows"""
    )
    await enqueue(db, keys, "ada@example.com")
    await db.execute("ANALYZE notifier.email_outbox")
    await db.execute("ANALYZE notifier.delivery_attempts")
    for name, argument in (("console_attempt_counts", 3600.0), ("console_series", 60)):
        plan = "\n".join(r[0] for r in await db.fetch("EXPLAIN " + sql(name), argument))
        assert "Seq Scan on delivery_attempts" not in plan, plan
        assert "Seq Scan on email_outbox" not in plan, plan
        assert "email_outbox_completed_idx" in plan, plan
