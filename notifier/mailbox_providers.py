"""What the large mailbox providers do with addresses: which spellings name one mailbox, and
which domains are shared by millions of unrelated people.

Limits count canonical mailboxes (notifier.addresses): at a provider that ignores dots in
the local part, `a.da@` and `ada@` reach one inbox and must share one budget, or a bot could
send an inbox one email per spelling (a ten-letter name has 1,023 of them). A per-domain
budget protects one organisation's domain from being bombed; at a shared provider's domain
it would only let one bot refuse every real user of that provider, so it is not applied
there (each mailbox still has its own limit, each client and the service theirs).
"""

from __future__ import annotations

# Domains that are another name of one provider's domain: their mailboxes are the same.
ALIASES: dict[str, str] = {"googlemail.com": "gmail.com"}
# Providers that deliver `a.b.c@` to `abc@`.
DOTS_IGNORED: frozenset[str] = frozenset({"gmail.com"})
# Consumer mailbox providers, each the domain of millions of independent people (the
# largest by share of signups; an operator adds others with NOTIFIER_SHARED_MAIL_DOMAINS).
SHARED_DOMAINS: tuple[str, ...] = (
    # Google, Microsoft, Yahoo, Apple, AOL and their regional domains.
    "gmail.com",
    "googlemail.com",
    "outlook.com",
    "hotmail.com",
    "live.com",
    "msn.com",
    "outlook.de",
    "outlook.fr",
    "hotmail.co.uk",
    "hotmail.fr",
    "hotmail.de",
    "hotmail.it",
    "hotmail.es",
    "live.co.uk",
    "live.fr",
    "live.de",
    "yahoo.com",
    "ymail.com",
    "yahoo.co.uk",
    "yahoo.fr",
    "yahoo.de",
    "yahoo.it",
    "yahoo.es",
    "yahoo.co.jp",
    "yahoo.com.br",
    "icloud.com",
    "me.com",
    "mac.com",
    "aol.com",
    # Others with tens of millions of users each.
    "proton.me",
    "protonmail.com",
    "pm.me",
    "gmx.com",
    "gmx.de",
    "gmx.net",
    "web.de",
    "t-online.de",
    "orange.fr",
    "free.fr",
    "libero.it",
    "mail.com",
    "yandex.ru",
    "mail.ru",
    "qq.com",
    "163.com",
    "126.com",
    "naver.com",
    "daum.net",
    "rediffmail.com",
    "comcast.net",
)


def canonical(local: str, domain: str) -> tuple[str, str]:
    """A mailbox's local part and domain as its provider reads them (already lowercased and
    untagged by the caller): aliases resolved, ignored dots removed."""
    domain = ALIASES.get(domain, domain)
    if domain in DOTS_IGNORED:
        local = local.replace(".", "")
    return local, domain
