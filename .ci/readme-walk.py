"""The README's walk, against a running `notifier dev`: sign up, read the inbox, confirm.

Arguments: the internal API's URL and the dev API key `notifier dev` printed.
"""

from __future__ import annotations

import sys
import time
from urllib.parse import parse_qs, urlsplit

import httpx

base, key = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 30
with httpx.Client(base_url=base, timeout=10, headers={"Authorization": f"Bearer {key}"}) as client:
    created = client.post(
        "/v1/verifications",
        json={"user_id": "ada", "email": "ada@example.com"},
        headers={"Idempotency-Key": "readme-walk-1"},
    )
    assert created.status_code == 202, created.text
    assert "notifier dev is running" in client.get("/").text, "/ is not the landing page"
    verification = created.json()["id"]
    while not (inbox := client.get("/dev/inbox.json").json()):
        assert time.monotonic() < deadline, "no mail reached the dev inbox"
        time.sleep(0.2)
    link = inbox[0]["link"]  # on the public listener
    assert "Confirm" in httpx.get(link, timeout=10).text
    token = parse_qs(urlsplit(link).query)["token"][0]
    public = link.split("/verify?", 1)[0]
    confirmed = httpx.post(f"{public}/verify", data={"token": token}, timeout=10)
    assert "data-outcome=verified" in confirmed.text, confirmed.text
    status = client.get(f"/v1/verifications/{verification}").json()
    assert status["verified"] is True and status["status"] == "sent", status
print("README walk: signed up, got the email in the dev inbox, confirmed, verified")
