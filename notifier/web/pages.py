"""The pages a person sees: after clicking a link (confirm, each outcome), and signing in to
the internal listener with an API key. No scripts; templates in templates/public/."""

from __future__ import annotations

from notifier.web.templating import render

# Headers for every page: the token is in the URL, so no referrer may carry it elsewhere and
# no cache may keep it; the pages run no script and post only to this origin.
PAGE_HEADERS = {
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


def _render(template: str, **values: object) -> str:
    return render(template, **values)


def _outcome(outcome: str, title: str, heading: str, text: str, token: str | None = None) -> str:
    return _render(
        "public/outcome.html",
        title=title,
        outcome=outcome,
        heading=heading,
        text=text,
        resend=token is not None,
        token=token,
    )


def confirm_page(token: str) -> str:
    """What GET /verify shows for a live link: nothing is confirmed until the button is pressed
    (mail scanners fetch links, but do not submit forms)."""
    return _render("public/confirm.html", token=token)


def verified_page() -> str:
    return _outcome(
        "verified",
        "Email verified",
        "Your email address is verified",
        "Thank you. You can close this page.",
    )


def already_verified_page() -> str:
    return _outcome(
        "already_verified",
        "Already verified",
        "This address is already verified",
        "Nothing more to do: the link was used before.",
    )


def expired_page(token: str) -> str:
    return _outcome(
        "expired",
        "Link expired",
        "This link has expired",
        "Verification links work for a limited time. We can send you a new one.",
        token,
    )


def invalid_page(superseded: bool = False) -> str:
    why = (
        "A newer link was sent to you after this one; please use the most recent email."
        if superseded
        else "This link is not valid. Check that you opened the whole link from the email."
    )
    return _outcome("invalid", "Invalid link", "This link cannot be used", why)


def resent_page() -> str:
    return _outcome(
        "resent",
        "New link sent",
        "A new link is on its way",
        "Check your inbox for a fresh verification email.",
    )


def resend_refused_page() -> str:
    return _outcome(
        "refused",
        "Cannot send a new link",
        "We cannot send a new link right now",
        "Please try again later, or start again from the app.",
    )


def too_old_page() -> str:
    return _outcome(
        "too_old",
        "Link too old",
        "This link is too old",
        "It can no longer be renewed. Please start again from the app.",
    )


def stale_form_page() -> str:
    """A signed-in browser's form that came without its page's CSRF token, or from
    another site: nothing was done."""
    return _render("public/stale_form.html")


def sign_in_page(next_path: str, problem: str | None = None) -> str:
    """The internal listener's sign-in form: an API key becomes a session cookie."""
    return _render("public/sign_in.html", next_path=next_path, problem=problem)
