"""A delivery's attempt log as people read it: the API's attempts and the console's timeline."""

from __future__ import annotations

import uuid

from notifier.storage.connection import Runner
from notifier.storage.queries import sql
from notifier.web.api_models import Attempt


async def attempts_of(conn: Runner, verification_id: uuid.UUID) -> list[Attempt]:
    """Every attempt on the verification's delivery, oldest first (none for an unknown id)."""
    return [
        Attempt(
            attempt=r["attempt"],
            claimed_by=r["lease_owner"],
            discovered_by=r["discovered_by"],
            outcome=r["outcome"],
            smtp_code=r["smtp_code"],
            detail=r["detail"],
            provider_message_id=r["provider_message_id"],
            body_sent=r["body_sent"],
            lease_held=r["lease_held"],
            duration_ms=r["duration_ms"],
            claimed_at=r["claimed_at"],
            finished_at=r["finished_at"],
        )
        for r in await conn.fetch(sql("verification_attempts"), verification_id)
    ]
