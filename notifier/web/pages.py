"""The pages a person sees: after clicking a link (confirm, each outcome), in the language
the verification was asked with, and signing in to the internal listener with an API key.
No scripts; templates in templates/public/, words in templates/<locale>/pages.toml."""

from __future__ import annotations

from dataclasses import dataclass

from notifier.redact import redact_email
from notifier.strings import Strings
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


@dataclass(frozen=True, slots=True)
class Reader:
    """Whom a link's page speaks to: in the words of the verification's language, for the
    product, about its address (redacted) and purpose. A link that names no verification
    (not one of ours) gets the default language and neither."""

    strings: Strings
    product_name: str
    email: str | None = None
    purpose: str | None = None

    def text(self, key: str) -> str:
        return self.strings.text(
            key,
            product_name=self.product_name,
            email=redact_email(self.email) if self.email else "",
            purpose=self.strings.purpose(self.purpose or ""),
        )

    @property
    def footer(self) -> str:
        return self.text("page.footer" if self.purpose else "page.footer_plain")


def _render(template: str, **values: object) -> str:
    return render(template, **values)


def _page(reader: Reader, page: str, token: str | None = None, text_key: str = "text") -> str:
    """A link's page in `reader`'s words: `page` names its table in pages.toml and, for
    scripts and tests, its outcome; `token`: it carries a button that posts it."""
    return _render(
        "public/outcome.html" if page != "confirm" else "public/confirm.html",
        lang=reader.strings.locale,
        product_name=reader.product_name,
        title=reader.text(f"{page}.title"),
        outcome=page,
        heading=reader.text(f"{page}.heading"),
        text=reader.text(f"{page}.{text_key}"),
        button=reader.text(f"{page}.button") if token is not None else None,
        token=token,
        footer=reader.footer,
    )


def confirm_page(reader: Reader, token: str) -> str:
    """What GET /verify shows for a live link: nothing is confirmed until the button is pressed
    (mail scanners fetch links, but do not submit forms)."""
    return _page(reader, "confirm", token)


def verified_page(reader: Reader) -> str:
    return _page(reader, "verified")


def already_verified_page(reader: Reader) -> str:
    return _page(reader, "already_verified")


def expired_page(reader: Reader, token: str) -> str:
    return _page(reader, "expired", token)


def invalid_page(reader: Reader, superseded: bool = False) -> str:
    return _page(reader, "invalid", text_key="superseded" if superseded else "text")


def resent_page(reader: Reader) -> str:
    return _page(reader, "resent")


def resend_refused_page(reader: Reader) -> str:
    return _page(reader, "refused")


def too_old_page(reader: Reader) -> str:
    return _page(reader, "too_old")


def stale_form_page() -> str:
    """A signed-in browser's form that came without its page's CSRF token, or from
    another site: nothing was done."""
    return _render("public/stale_form.html")


def sign_in_page(next_path: str, problem: str | None = None, key_file: str | None = None) -> str:
    """The internal listener's sign-in form: an API key becomes a session cookie.
    `key_file`: where notifier dev keeps the key it made, which the form then points to."""
    return _render("public/sign_in.html", next_path=next_path, problem=problem, key_file=key_file)
