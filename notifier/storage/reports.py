"""Reports about accepted deliveries, kept once each and acted on in one statement (schema
apply_report_v1): what a report does is decided there and in notifier.reports."""

from __future__ import annotations

from notifier.addresses import folded
from notifier.reports import Report, recipients_own
from notifier.storage.connection import Runner
from notifier.storage.queries import sql


async def apply(conn: Runner, report: Report, suppression_seconds: float) -> str:
    """Keeps `report` and does what it calls for: bounced, suppressed, counted, duplicate
    (seen before: nothing changes twice) or unknown (no such delivery)."""
    email = await conn.fetchval(sql("report_target"), report.outbox_id)
    if email is None:
        return "unknown"
    suppress = report.bounce_type == "permanent" and recipients_own(report.status)
    done: str = await conn.fetchval(
        sql("apply_report"),
        report.outbox_id,
        report.report_id,
        report.kind,
        report.bounce_type,
        report.source,
        report.status,
        report.diagnostic,
        folded(email),
        suppress,
        suppression_seconds,
    )
    return done
