"""The pages a person sees: after clicking a link (confirm, each outcome), and signing in to
the internal listener with an API key. No scripts."""

from __future__ import annotations

from html import escape

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

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;background:#f5f6f8;color:#1d2330;
margin:0;display:flex;min-height:100vh;align-items:center;justify-content:center}
main{background:#fff;border-radius:12px;box-shadow:0 2px 12px rgba(0,0,0,.08);padding:2rem 2.5rem;
max-width:28rem;text-align:center}
h1{font-size:1.4rem;margin:0 0 .75rem}p{line-height:1.5;color:#4a5263}
button{font:inherit;font-weight:600;background:#2f6fed;color:#fff;border:0;border-radius:8px;
padding:.7rem 1.6rem;cursor:pointer}button:hover{background:#2459c4}
label{font-weight:600;color:#1d2330}
input[type=password]{font:inherit;width:100%;box-sizing:border-box;margin-top:.3rem;
padding:.55rem .75rem;border:1px solid #4a5263;border-radius:8px}
:focus-visible{outline:3px solid #2459c4;outline-offset:2px}
"""


def _page(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><main>{body}</main></body></html>"
    )


def _form(action: str, token: str, label: str, name: str) -> str:
    return (
        f'<form method=post action="{escape(action)}">'
        f'<input type=hidden name=token value="{escape(token)}">'
        f'<button type=submit name="{escape(name)}">{escape(label)}</button></form>'
    )


def confirm_page(token: str) -> str:
    """What GET /verify shows for a live link: nothing is confirmed until the button is pressed
    (mail scanners fetch links, but do not submit forms)."""
    return _page(
        "Confirm your email address",
        "<h1>Confirm your email address</h1>"
        "<p>Press the button to finish verifying your address.</p>"
        + _form("/verify", token, "Confirm", "confirm"),
    )


def verified_page() -> str:
    return _page(
        "Email verified",
        "<h1 id=outcome data-outcome=verified>Your email address is verified</h1>"
        "<p>Thank you. You can close this page.</p>",
    )


def already_verified_page() -> str:
    return _page(
        "Already verified",
        "<h1 id=outcome data-outcome=already_verified>This address is already verified</h1>"
        "<p>Nothing more to do: the link was used before.</p>",
    )


def expired_page(token: str) -> str:
    return _page(
        "Link expired",
        "<h1 id=outcome data-outcome=expired>This link has expired</h1>"
        "<p>Verification links work for a limited time. We can send you a new one.</p>"
        + _form("/verify/resend", token, "Send me a new link", "resend"),
    )


def invalid_page(superseded: bool = False) -> str:
    why = (
        "A newer link was sent to you after this one; please use the most recent email."
        if superseded
        else "This link is not valid. Check that you opened the whole link from the email."
    )
    return _page(
        "Invalid link",
        f"<h1 id=outcome data-outcome=invalid>This link cannot be used</h1><p>{escape(why)}</p>",
    )


def resent_page() -> str:
    return _page(
        "New link sent",
        "<h1 id=outcome data-outcome=resent>A new link is on its way</h1>"
        "<p>Check your inbox for a fresh verification email.</p>",
    )


def resend_refused_page() -> str:
    return _page(
        "Cannot send a new link",
        "<h1 id=outcome data-outcome=refused>We cannot send a new link right now</h1>"
        "<p>Please try again later, or start again from the app.</p>",
    )


def too_old_page() -> str:
    return _page(
        "Link too old",
        "<h1 id=outcome data-outcome=too_old>This link is too old</h1>"
        "<p>It can no longer be renewed. Please start again from the app.</p>",
    )


def stale_form_page() -> str:
    """A signed-in browser's form that came without its page's CSRF token, or from
    another site: nothing was done."""
    return _page(
        "Form refused",
        "<h1>This form was refused</h1>"
        "<p role=alert>Nothing was changed: the form came from another site, or from a page "
        "opened before you last signed in. Go back, reload the page and try again.</p>",
    )


def sign_in_page(next_path: str, problem: str | None = None) -> str:
    """The internal listener's sign-in form: an API key becomes a session cookie."""
    warning = f"<p role=alert id=problem>{escape(problem)}</p>" if problem else ""
    return _page(
        "Sign in to notifier",
        "<h1>Sign in</h1><p>Paste an API key (<code>notifier keys create</code> makes one). "
        "The key stays in this browser only as a session.</p>"
        + warning
        + '<form method=post action="/sign-in">'
        + f'<input type=hidden name=next value="{escape(next_path)}">'
        + "<p><label for=key>API key</label><br>"
        + "<input id=key name=key type=password autocomplete=off required size=40></p>"
        + "<button type=submit>Sign in</button></form>",
    )
