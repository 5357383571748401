"""The public listener: only what an emailed link's token already authorizes.

It listens on NOTIFIER_PUBLIC_HOST/PORT, the one port an operator exposes to the internet
(behind a reverse proxy). It serves the page a link opens, its Confirm button, one fresh
link for an expired one, the JSON confirm for apps, and the probes; every other path is 404.
Whoever calls it is a stranger: an incoming trace context starts a new trace (linked, never
continued), and nothing here reveals more than the token in hand does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Any

import httpcore
from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from notifier.return_urls import InvalidReturn, signed_return
from notifier.storage import reports as stored_reports
from notifier.storage.outbox import confirm, request_standalone
from notifier.storage.queries import sql
from notifier.tokens import looks_like_token
from notifier.verifications import Confirmation, RequestError, resend_key
from notifier.web import pages, ses
from notifier.web.access import ScopedRoute, access
from notifier.web.api_models import TOKEN_MAX_CHARS, ConfirmIn, ConfirmOut
from notifier.web.listeners import (
    BODY_TIMEOUT_SECONDS,
    DATABASE_TIMEOUT_SECONDS,
    MAX_BODY_BYTES,
    Services,
    Svc,
    errors,
    html_pages,
    json_errors,
    listener_app,
    probes,
    require_json,
)
from notifier.web.responses import OrjsonResponse, error, html

log = logging.getLogger(__name__)

CONFIRM_MESSAGES = {
    "verified": "The email address is verified.",
    "already_verified": "The email address was already verified with this link.",
    "expired": "The link has expired; request a new verification email.",
    "invalid": "The link is not valid.",
}
CONFIRM_STATUS = {"verified": 200, "already_verified": 200, "expired": 410, "invalid": 400}
_LINK_PAGES = html_pages(
    {
        400: "The link is not valid, or a newer link replaced it.",
        410: "The link expired; the page offers a new one.",
    }
)
# Posted by notifier's own pages; a link's query string is left unbounded so that an
# over-long link still gets the "cannot be used" page rather than a JSON error.
FormToken = Annotated[str, Form(max_length=TOKEN_MAX_CHARS)]


def create_public_app(
    services: Services,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_timeout: float = BODY_TIMEOUT_SECONDS,
) -> FastAPI:
    """The public ASGI app over shared `services` (whose pool the caller owns)."""
    app = listener_app(
        "notifier public pages",
        services,
        max_body_bytes=max_body_bytes,
        body_timeout=body_timeout,
        # Nobody here proves who they are: a new trace for every request.
        trust_incoming=None,
    )
    app.include_router(links)
    app.include_router(probes)
    return app


links = APIRouter(route_class=ScopedRoute)


@links.get(
    "/verify",
    response_class=HTMLResponse,
    responses={**_LINK_PAGES, **json_errors(422, 503)},
    summary="The page an emailed link opens",
    **access("open"),
)
async def verify_page(svc: Svc, token: Annotated[str, Query()] = "") -> HTMLResponse:
    # Changes nothing: mail scanners prefetch links.
    result = await _confirm(svc, token, apply=False)
    return _outcome_page(svc, result, token)


@links.post(
    "/verify",
    response_class=HTMLResponse,
    responses={
        303: {"description": "Confirmed: back to the verification's return_to, signed."},
        **_LINK_PAGES,
        **json_errors(413, 422, 503),
    },
    summary="The Confirm button (303 to the verification's return_to, when it has one)",
    **access("open"),
)
async def verify_submit(svc: Svc, token: FormToken = "") -> Response:
    result = await _confirm(svc, token, apply=True)
    back = _return_url(svc, result)
    if back is not None:
        # Back to the app, which can trust what the signed parameters say.
        return RedirectResponse(back, status_code=303)
    return _outcome_page(svc, result, token)


@links.post(
    "/verify/resend",
    response_class=HTMLResponse,
    responses={
        **html_pages(
            {
                202: "A new link is on its way.",
                410: "The link is too old to renew; start again from the app.",
                429: "No new link can be sent now (the same answer for every reason).",
            }
        ),
        **_LINK_PAGES,
        **json_errors(413, 422, 503),
    },
    summary="Ask for a fresh link",
    **access("open"),
)
async def verify_resend(svc: Svc, token: FormToken = "") -> HTMLResponse:
    result = await _confirm(svc, token, apply=False)
    if result.renewed_here:
        # This link's fresh link went out already: pressing again sends nothing more.
        return html(pages.resent_page(_reader(svc, result)), 202)
    if result.outcome != "expired":
        # A live link, one already used, or one that cannot be used: the page it shows.
        return _outcome_page(svc, result, token)
    if not result.renewable(svc.policy.resend_horizon):
        return html(pages.too_old_page(_reader(svc, result)), 410)
    assert result.user_id is not None and result.email is not None
    try:
        async with svc.pool.acquire(timeout=DATABASE_TIMEOUT_SECONDS) as conn:
            await request_standalone(
                conn,
                user_id=result.user_id,
                email=result.email,
                purpose=result.purpose,
                idempotency_key=resend_key(token),
                policy=svc.policy,
                client_id=result.client_id,
                locale=result.locale,
                kept_return_to=result.return_to,
                # Asked for from a link's page: a fresh link, whatever the default method.
                method="link",
            )
    except RequestError:
        # The same answer whatever the reason (throttled, suppressed, ...): whoever
        # holds a link learns nothing about the address beyond it.
        return html(pages.resend_refused_page(_reader(svc, result)), 429)
    return html(pages.resent_page(_reader(svc, result)), 202)


@links.post(
    "/v1/verifications/confirm",
    response_model=ConfirmOut,
    responses={
        410: {"model": ConfirmOut, "description": "The link expired."},
        400: {"model": ConfirmOut, "description": "The link is not valid."},
        **errors(413, 415, 422, 503),
    },
    dependencies=[Depends(require_json)],
    summary="Confirm a verification token (for JSON clients)",
    **access("open"),
)
async def confirm_json(body: ConfirmIn, svc: Svc) -> Any:
    result = await _confirm(svc, body.token, apply=True)
    outcome = result.outcome if result.outcome != "ready" else "invalid"
    out = ConfirmOut(
        outcome=outcome,
        verification_id=result.verification_id if outcome != "invalid" else None,
        superseded_by=result.superseded_by,
        return_url=_return_url(svc, result),
        message=CONFIRM_MESSAGES[outcome],
    )
    return OrjsonResponse(out.model_dump(mode="json"), status_code=CONFIRM_STATUS[outcome])


@links.post(
    "/inbound/ses",
    responses={
        200: {"description": "Taken (or confirmed, for a subscription)."},
        **errors(403, 413, 503),
    },
    summary="Amazon SES bounces and complaints through SNS (each message signed by SNS)",
    # No key: the message proves itself (topic, certificate host, signature), in that order,
    # before anything is fetched or written.
    **access("open"),
)
async def ses_notification(request: Request, svc: Svc) -> Response:
    try:
        message = ses.message_of(await request.body())
        if message.get("TopicArn") not in svc.inbound.ses_topics:
            raise ses.Refused("its topic is not among NOTIFIER_SES_TOPICS")
        url = message.get("SigningCertURL", "")
        if not ses.certificate_url_allowed(url, svc.inbound.sns_certificate_urls):
            raise ses.Refused("its certificate is not on an SNS host")
        if not ses.fresh(message):
            raise ses.Refused("it is not from the last hour")
        if not ses.signature_holds(message, await svc.certificates.get(url)):
            raise ses.Refused("its signature does not hold")
    except ses.Refused as exc:
        log.warning("refused an SNS message on /inbound/ses: %s", exc)
        return error(403, "refused", f"not a signed SNS message this service takes: {exc}")
    except (httpcore.NetworkError, httpcore.TimeoutException, OSError) as exc:
        log.warning("could not fetch an SNS signing certificate (%s)", exc)
        return error(503, "unavailable", "the signing certificate could not be fetched")
    if message["Type"] == "SubscriptionConfirmation":
        return await _subscribe(svc, message)
    if message["Type"] != "Notification":
        return OrjsonResponse({"result": "ignored"})
    event = ses.event_of(message)
    outbox_id, message_id = ses.delivery_named(event, svc.policy.keys, svc.bounce_domain)
    async with svc.pool.acquire(timeout=DATABASE_TIMEOUT_SECONDS) as conn:
        if outbox_id is None and message_id is not None:
            outbox_id = await conn.fetchval(sql("outbox_by_message_id"), message_id)
        if outbox_id is None:
            return OrjsonResponse({"result": "unknown delivery"})
        done = [
            await stored_reports.apply(conn, report, svc.suppression_seconds)
            for report in ses.reports_of(event, message["MessageId"], outbox_id)
        ]
    return OrjsonResponse({"result": done})


async def _subscribe(svc: Services, message: Mapping[str, str]) -> Response:
    """Confirms the subscription by GETting its SubscribeURL, held to the SNS hosts."""
    url = message.get("SubscribeURL", "")
    if not ses.subscribe_url_allowed(url, svc.inbound.sns_certificate_urls):
        return error(403, "refused", "its SubscribeURL is not on an SNS host")
    try:
        await ses.fetch(url, 64 * 1024)
    except (ses.Refused, httpcore.NetworkError, httpcore.TimeoutException, OSError) as exc:
        log.warning("could not confirm the SNS subscription to %s (%s)", message["TopicArn"], exc)
        return error(503, "unavailable", "the subscription could not be confirmed")
    log.info("confirmed the SNS subscription to %s", message["TopicArn"])
    return OrjsonResponse({"result": "subscribed"})


async def _confirm(svc: Services, token: str, *, apply: bool) -> Confirmation:
    """`confirm`, taking a database connection only for a token that could be one of ours:
    anyone can send garbage to these pages, and garbage must cost no connection."""
    if not looks_like_token(token) or not svc.policy.keys.knows(token):
        return Confirmation("invalid")
    async with svc.pool.acquire(timeout=DATABASE_TIMEOUT_SECONDS) as conn:
        return await confirm(conn, token, apply=apply, keys=svc.policy.keys)


def _return_url(svc: Services, result: Confirmation) -> str | None:
    """Where a confirmed link's person goes back to, signed; None: nowhere (none was given,
    or the allow-list no longer has it: then the page says what happened)."""
    if result.return_to is None or result.verification_id is None:
        return None
    if result.outcome not in ("verified", "already_verified"):
        return None
    try:
        svc.policy.limits.return_urls.check(result.return_to)
    except InvalidReturn:
        log.warning(
            "verification %s's return_to is no longer under NOTIFIER_RETURN_URLS: not redirecting",
            result.verification_id,
        )
        return None
    return signed_return(
        result.return_to,
        result.verification_id,
        result.outcome,
        svc.policy.keys,
        result.client_id,
    )


def _reader(svc: Services, result: Confirmation) -> pages.Reader:
    """Whom the page speaks to: the verification's language, product, address and purpose
    (none of them for a token that names no verification of ours)."""
    return pages.Reader(
        svc.strings.for_locale(result.locale),
        svc.product_name,
        result.email,
        result.purpose,
    )


def _outcome_page(svc: Services, result: Confirmation, token: str) -> HTMLResponse:
    reader = _reader(svc, result)
    if result.outcome == "ready":
        # A live link: nothing happens until its Confirm button is pressed.
        return html(pages.confirm_page(reader, token))
    if result.outcome == "verified":
        return html(pages.verified_page(reader))
    if result.outcome == "already_verified":
        return html(pages.already_verified_page(reader))
    if result.outcome == "expired":
        return html(pages.expired_page(reader, token), 410)
    return html(pages.invalid_page(reader, result.superseded), 400)
