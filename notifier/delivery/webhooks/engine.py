"""The webhook sender: delivers events to the app's endpoints under leases, apart from email.

One process runs one WebhookWorker beside its email Worker, with slots of its own
(NOTIFIER_WEBHOOK_CONCURRENCY), so a slow or dead receiver never delays an email. A round
claims every due delivery there is room for (claim_webhooks_v1, at most
NOTIFIER_WEBHOOK_ENDPOINT_CONCURRENCY in flight to one endpoint across every worker), sends
each in a task of its own, and completes it (batched) only while its lease still holds. The
next round starts when NOTIFY notifier_webhooks_v1 says new deliveries were written, when one
of its own requests ends (its endpoint has a place again), when a retry or an abandoned lease
comes due (asked of the database after a round, at most every fifth of a second while its
requests are in flight, and again a fifth of a second later while due deliveries wait for
places another worker holds), or after NOTIFIER_WEBHOOK_SWEEP_INTERVAL at the latest. At
least once: a delivery is sent again only after a failure or an unknown outcome (its
webhook-id lets the receiver drop a duplicate).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC

import anyio
import orjson
from anyio.abc import TaskGroup, TaskStatus

from notifier import events
from notifier.config import WebhookSettings
from notifier.delivery.batching import Batcher
from notifier.delivery.shielded import persisted
from notifier.delivery.webhooks import leases
from notifier.delivery.webhooks.leases import Attempted, Claimed, Completed
from notifier.delivery.webhooks.sender import Answer, Sender
from notifier.event_types import event_id
from notifier.events import Events, Observer
from notifier.storage.connection import Pool
from notifier.tokens import TokenKeys, UnknownKeyError
from notifier.webhook_outcomes import retry_delay
from notifier.webhook_signing import headers, secret_of

log = logging.getLogger(__name__)

CHANNEL = "notifier_webhooks_v1"
# A lease outlasts the request it covers (bounded by the timeout) by this much, for the
# completion's round trip.
LEASE_MARGIN_SECONDS = 30.0
CLAIM_ERROR_BACKOFF_SECONDS = 1.0
# How often the sender asks what comes due next while its requests are in flight, and how
# soon it looks again when deliveries are due but their endpoints' places are all taken.
LOOK_SECONDS = 0.2
COMPLETION_BATCH = 100


def body_of(row: Claimed) -> bytes:
    """The request body: the event's type, when it happened, and its payload as stored."""
    return orjson.dumps(
        {
            "type": row.event_type,
            "timestamp": row.occurred_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "data": orjson.Fragment(row.data),
        }
    )


class WebhookWorker:
    """Owns a process's webhook deliveries for as long as `run()` runs; `stop()` ends
    claiming, and `run()` returns once the requests in flight (bounded by the timeout) end."""

    def __init__(
        self,
        *,
        pool: Pool,
        settings: WebhookSettings,
        keys: TokenKeys,
        owner: str,
        observer: Observer | None = None,
        sender: Sender | None = None,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.keys = keys
        self.owner = owner
        self.observer: Observer = observer or Events()
        self.sender = sender or Sender(settings.timeout, settings.allow_private)
        self.lease_seconds = settings.timeout + LEASE_MARGIN_SECONDS
        self._completer: Batcher[Attempted, Completed] = Batcher(
            lambda batch: leases.complete(pool, batch, owner, settings.disable_after),
            COMPLETION_BATCH,
        )
        self._woken = anyio.Event()
        self._in_flight = 0
        self._slot_freed = anyio.Event()
        self._sends: TaskGroup | None = None
        self._claiming: anyio.CancelScope | None = None
        self._stopping = False

    def wake(self) -> None:
        """New deliveries (NOTIFY), or the LISTEN connection came back: claim now."""
        self._woken.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            async with anyio.create_task_group() as services:
                services.start_soon(self._completer.run)
                async with anyio.create_task_group() as sends:
                    self._sends = sends
                    with anyio.CancelScope() as claiming:
                        self._claiming = claiming
                        if self._stopping:
                            claiming.cancel()
                        task_status.started()
                        await self._rounds()
                services.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.sender.aclose()
        log.info("webhook sender %s stopped", self.owner)

    def stop(self) -> None:
        self._stopping = True
        if self._claiming is not None:
            self._claiming.cancel()

    async def _rounds(self) -> None:
        looked_at = -LOOK_SECONDS  # when the database was last asked what comes due next
        due_at: float | None = None  # what it said, on this clock
        while True:
            # Notifications from now on wake the next round, even while this one claims.
            self._woken = anyio.Event()
            try:
                short = await self._claim_all_due()
                now = anyio.current_time()
                wait: float | None
                if self._in_flight and now - looked_at < LOOK_SECONDS:
                    # Our own requests wake us as they end: under load, ask again of retries
                    # and lapsed leases only every LOOK_SECONDS, not after every claim.
                    wait = looked_at + LOOK_SECONDS - now
                    if due_at is not None and due_at > now:
                        wait = min(wait, due_at - now)
                else:
                    wait = await leases.next_due(self.pool)
                    looked_at, due_at = now, None if wait is None else now + wait
                    if short and wait == 0.0:
                        # Due now, yet not claimed: its endpoint has all its places in flight
                        # (another worker's requests do not wake us as they end).
                        wait = LOOK_SECONDS
            except Exception as exc:
                log.warning("webhook claim failed (%s); retrying", exc)
                wait = CLAIM_ERROR_BACKOFF_SECONDS
            limit = self.settings.sweep_interval
            with anyio.move_on_after(limit if wait is None else min(wait, limit)):
                await self._woken.wait()

    async def _claim_all_due(self) -> bool:
        """Claim until the slots are full or a claim comes back short (returns True)."""
        while True:
            free = self.settings.concurrency - self._in_flight
            if free <= 0:
                self._slot_freed = anyio.Event()
                await self._slot_freed.wait()
                continue
            # Shielded: a claim cut off by stop() would leave its rows leased unseen.
            with anyio.CancelScope(shield=True, deadline=anyio.current_time() + 10.0):
                claimed = await leases.claim(
                    self.pool,
                    self.owner,
                    self.lease_seconds,
                    free,
                    self.settings.endpoint_concurrency,
                )
                if self._stopping and claimed:
                    await leases.release(self.pool, claimed)
                    return False
            assert self._sends is not None
            for row in claimed:
                self._in_flight += 1
                self._sends.start_soon(self._deliver, row)
            if len(claimed) < free:
                return True

    async def _deliver(self, row: Claimed) -> None:
        try:
            try:
                answer = await self._send(row)
            except Exception as exc:
                log.exception("webhook delivery %d: the request failed unexpectedly", row.id)
                answer = Answer("unknown", None, f"{type(exc).__name__}: {exc}"[:300], 0.0)
            delay = retry_delay(
                answer.outcome, row.attempt, self.settings.retry_schedule, answer.retry_after
            )
            attempted = Attempted(
                row.id,
                row.lease_token,
                answer.outcome,
                answer.status_code,
                answer.detail,
                answer.seconds * 1000,
                delay,
            )
            done = await persisted(lambda: self._completer.submit(attempted))
            if isinstance(done, Exception):
                log.error(
                    "could not record webhook delivery %d's attempt (%s): it is sent again "
                    "once its lease runs out",
                    row.id,
                    done,
                )
                return
            self._noticed(row, answer, done)
            # Its endpoint has a place free again, or a retry was scheduled that the next
            # round's wait must know of.
            self._woken.set()
        finally:
            self._in_flight -= 1
            self._slot_freed.set()

    async def _send(self, row: Claimed) -> Answer:
        body = body_of(row)
        signing = []
        for ref in row.secrets:
            try:
                signing.append(secret_of(self.keys, row.endpoint_id, ref))
            except UnknownKeyError:
                continue  # made with a token secret since removed
        if not signing:
            return Answer(
                "refused",
                None,
                "its secret was made with a NOTIFIER_TOKEN_SECRET secret no longer "
                "configured: rotate the endpoint (notifier webhooks rotate)",
                0.0,
            )
        signed = headers(event_id(row.event_uid), int(time.time()), body, signing)
        return await self.sender.post(row.url, signed, body)

    def _noticed(self, row: Claimed, answer: Answer, done: Completed) -> None:
        self.observer.notice(
            events.WebhookAttempted(
                self.owner,
                row.id,
                row.endpoint_id,
                answer.outcome,
                done.status,
                answer.seconds,
                row.attempt,
            )
        )
        if done.status == "dead":
            log.warning(
                "webhook delivery %d (%s to endpoint %s) is dead after %d attempts: %s; "
                "replay it from the console once the endpoint works",
                row.id,
                row.event_type,
                row.endpoint_id,  # not its URL: URLs often carry a credential
                row.attempt,
                answer.detail,
            )
        if done.disabled_reason is not None:
            reason = done.disabled_reason
            log.error("webhook endpoint %s disabled: %s", row.endpoint_id, reason)
            self.observer.notice(events.WebhookEndpointDisabled(row.endpoint_id, reason))
