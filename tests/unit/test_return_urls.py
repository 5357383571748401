"""The allow-list a return_to is held to: what each prefix allows, and what no URL may carry."""

from __future__ import annotations

import uuid

import pytest

from notifier.return_urls import (
    InvalidReturn,
    Prefix,
    ReturnUrls,
    check_return,
    return_secrets,
    signed_return,
)
from notifier.tokens import TokenKeys

LIST = ReturnUrls.parse(
    "https://app.example.com/welcome https://*.example.org/ http://localhost:3000/"
)
KEYS = TokenKeys(("a return-url test secret, thirty-two chars long",))


@pytest.mark.parametrize(
    "url",
    [
        "https://app.example.com/welcome",
        "https://app.example.com/welcome/",
        "https://app.example.com/welcome/step?x=1#top",
        "https://APP.Example.com/welcome",
        "https://app.example.com:443/welcome",
        "https://shop.example.org/",
        "https://shop.example.org/any/path",
        "http://localhost:3000/done",
    ],
)
def test_a_url_under_a_prefix_is_allowed(url: str) -> None:
    assert LIST.check(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "https://app.example.com/welcomeback",
        "https://app.example.com/",
        "https://app.example.com/Welcome",
        "http://app.example.com/welcome",
        "https://app.example.com:444/welcome",
        "https://evil.com/welcome",
        "https://app.example.com.evil.com/welcome",
        "https://example.org/",
        "https://a.b.example.org/",
        "https://-x.example.org/",
        "http://localhost:3001/",
        "https://app.example.com@evil.com/welcome",
        "https://user:pw@app.example.com/welcome",
        "https://app.example.com\\evil.com/welcome",
        "https://app.example.com/welcome/../../admin",
        "https://app.example.com/welcome/./x",
        "https://app.example.com/welcome/%2e%2e/admin",
        "https://app.example.com/welcome%2Fx",
        "https://app.example.com/welcome%5cx",
        "https://app.example.com/welcome/..;/admin",
        "https://app.example.com/welcome/.%00./admin",
        "https://app.example.com/welcome/%u002e%u002e/admin",
        "https://app.example.com/welcome//evil",
        "https://app.example.com/welcome/x%00",
        "https://app.example.com/welcome\t",
        "https://app.example.com/welcome\n",
        "https://app.example.com/welcome?signature=x",
        "https://app.example.com/welcome?a=1&verification_id=x",
        "//app.example.com/welcome",
        "/welcome",
        "javascript://app.example.com/welcome",
        "https://app.example.com:99999/welcome",
        "https://" + "a" * 2048 + ".example.org/",
    ],
)
def test_a_url_outside_every_prefix_or_unusual_is_refused(url: str) -> None:
    with pytest.raises(InvalidReturn):
        LIST.check(url)


def test_a_key_narrows_the_list_it_can_never_widen() -> None:
    assert LIST.check("https://shop.example.org/x", ["https://shop.example.org/"])
    with pytest.raises(InvalidReturn):
        LIST.check("https://app.example.com/welcome", ["https://shop.example.org/"])
    with pytest.raises(InvalidReturn):  # on the key's list, not the deployment's
        LIST.check("https://other.example.net/", ["https://other.example.net/"])


@pytest.mark.parametrize(
    "prefix",
    ["app.example.com", "https://app.example.com/?x=1", "https://*/", "https://**.example.org/",
     "https://a.*.example.org/", "ftp://app.example.com/"],
)  # fmt: skip
def test_a_malformed_prefix_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError):
        Prefix.parse(prefix)


def test_an_empty_list_refuses_every_return_to() -> None:
    with pytest.raises(InvalidReturn, match="empty"):
        ReturnUrls().check("https://app.example.com/welcome")


def test_the_signature_is_the_documented_scheme() -> None:
    import base64
    import hashlib
    import hmac
    from urllib.parse import parse_qs, urlsplit

    vid = uuid.uuid4()
    url = signed_return(
        "https://app.example.com/welcome", vid, "verified", KEYS, "0123456789ab", 1000.0
    )
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    [(key_id, secret)] = return_secrets(KEYS, "0123456789ab")
    padded = secret + "=" * (-len(secret) % 4)
    mac = hmac.new(
        base64.urlsafe_b64decode(padded),
        f"{vid}.verified.{query['expires']}".encode(),
        hashlib.sha256,
    ).digest()
    assert query["signature"] == f"{key_id}." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    assert query["expires"] == "1600"
    assert check_return(url, KEYS, client_id="0123456789ab", now=1599.0).verification_id == vid


def test_the_parameters_go_before_a_fragment_and_after_a_query() -> None:
    url = signed_return(
        "https://app.example.com/welcome?a=1#top", uuid.uuid4(), "verified", KEYS, None
    )
    assert url.startswith("https://app.example.com/welcome?a=1&verification_id=")
    assert url.endswith("#top")


def test_an_empty_query_is_replaced_by_ours() -> None:
    url = signed_return("https://app.example.com/welcome?", uuid.uuid4(), "verified", KEYS, None)
    assert url.startswith("https://app.example.com/welcome?verification_id=")
    assert check_return(url, KEYS).outcome == "verified"


def test_a_url_carrying_two_of_a_parameter_is_refused() -> None:
    url = signed_return("https://app.example.com/welcome", uuid.uuid4(), "verified", KEYS, None)
    with pytest.raises(InvalidReturn):
        check_return(url + "&outcome=verified", KEYS)
