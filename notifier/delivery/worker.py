"""The delivery worker: claims outbox rows under leases, sends them, completes them.

One process runs one Worker: an intake fed by LISTEN, a slow sweep and a retry timer; a
claimer that turns waiting ids into leases in batches sized by free send slots; one task
per send; coalescing batchers for the pre-DATA gate and for completions; and a lease keeper
that renews leases of sends still in flight.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import random
import socket
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus

from notifier import events, verp
from notifier.addresses import envelope_recipient, folded, spellings
from notifier.config import WorkerSettings
from notifier.delivery.batching import Batcher
from notifier.delivery.destinations import DomainPlaces, Ticket
from notifier.delivery.intake import Intake
from notifier.delivery.leases import Claimed, Completed, Completion, Held, Leases
from notifier.delivery.listener import Listener
from notifier.delivery.mailer import SendResult, Transport
from notifier.delivery.messages import Templates
from notifier.delivery.retries import Backoff, Throttle
from notifier.delivery.send_gate import Flight, SendGate
from notifier.delivery.send_rate import SendRate
from notifier.delivery.shielded import CLEANUP_TIMEOUT_SECONDS, persisted
from notifier.events import Events, Observer
from notifier.outcomes import AttemptOutcome, Discovery, Sendability, judge
from notifier.redact import redact_spellings
from notifier.storage.connection import Pool
from notifier.telemetry import (
    DESTINATION,
    ClaimTrace,
    child_span,
    process_span,
    record_claim_batch,
    tracing_enabled,
)
from notifier.tokens import TokenKeys, UnknownKeyError

log = logging.getLogger(__name__)

T = TypeVar("T")

# After a failed claim (database unreachable) the claimer waits this long, seconds.
CLAIM_ERROR_BACKOFF_SECONDS = 0.5
# Sweeps are spread by this fraction so a fleet of workers does not sweep in lockstep.
SWEEP_JITTER = 0.1
# Leases are renewed once a third of the lease has passed, checked four times as often.
RENEW_AFTER_FRACTION = 1 / 3
# The name every send task carries.
SEND_TASK_NAME = "notifier.delivery.worker.deliver"


def _domain_of(row: Claimed) -> str:
    return row.email.rpartition("@")[2].lower()


def default_owner(name: str = "worker") -> str:
    """host:pid/name, so a lease names the machine, process and worker that holds it."""
    return f"{socket.gethostname()}:{os.getpid()}/{name}"


@dataclass(frozen=True, slots=True)
class _Claim:
    """The claim a row came from: its trace, and when its statement was sent (monotonic)."""

    trace: ClaimTrace
    sent_at: float


class Worker:
    """Owns a worker's delivery loop for as long as `run()` runs.

    `stop()` begins a graceful shutdown (invariant 7): claiming stops at once, sends in
    flight get `shutdown_grace` seconds, then the rest are cancelled and their leases
    released uncounted; `run()` returns when nothing is held.
    """

    def __init__(
        self,
        *,
        pool: Pool,
        database_url: str,
        settings: WorkerSettings,
        transport: Transport,
        templates: Templates,
        keys: TokenKeys,
        mail_from: str,
        public_url: str,
        owner: str | None = None,
        observer: Observer | None = None,
        bounce_domain: str | None = None,
    ) -> None:
        self.settings = settings
        # NOTIFIER_BOUNCE_DOMAIN: each delivery's own return path there (None: mail_from).
        self.bounce_domain = bounce_domain
        self.pool = pool
        self.transport = transport
        self.templates = templates
        self.keys = keys
        self.mail_from = mail_from
        self.public_url = public_url.rstrip("/")
        # Told of every step (metrics in production, a recorder in tests); keeps nothing.
        self.observer: Observer = observer or Events()
        self.leases = Leases(
            pool, owner or default_owner(), settings.lease_seconds, settings.suppression_ttl
        )
        self.backoff = Backoff.from_settings(settings)
        self.throttle = Throttle.from_settings(settings)
        # NOTIFIER_SEND_RATE and NOTIFIER_DAILY_QUOTA: the fleet's bucket, drawn on before each
        # claim (None: no limit, until the provider says its daily quota is spent).
        self.send_rate: SendRate | None = None
        if settings.send_rate is not None or settings.daily_quota is not None:
            self.send_rate = SendRate(pool, settings.send_rate, settings.daily_quota)
        self._paused_until: datetime | None = None
        self.intake = Intake()
        # database_url is where LISTEN goes (NOTIFIER_LISTEN_DATABASE_URL); its round trips'
        # NOTIFYs go through the pool, so they cross from one connection to the other.
        self.listener = Listener(
            database_url,
            pool,
            on_ids=self.intake.offer_ids,
            on_connected=lambda: self.intake.request_sweep("sweep"),
            observer=self.observer,
            check_interval=settings.listener_check_interval,
            check_timeout=settings.listener_check_timeout,
        )
        self._gate: Batcher[Held, Sendability] = Batcher(self.leases.check, settings.batch_size)
        self._completer: Batcher[Completion, Completed] = Batcher(
            lambda batch: self.leases.complete(batch, settings.unknown_outcome_limit),
            settings.batch_size,
        )
        self._flights: dict[int, Flight] = {}
        # Read once: OpenTelemetry reads the environment on every provider lookup.
        self._traced = tracing_enabled()
        self._send_attributes = dict(transport.span_attributes)
        self._slots: anyio.Semaphore | None = None
        self._sends: TaskGroup | None = None
        self._intake_scope: anyio.CancelScope | None = None
        self._claim_scope: anyio.CancelScope | None = None
        # Rows whose attempt's result could not be recorded: their lease must run out, as
        # the attempt may have sent.
        self._unrecorded: set[int] = set()
        # No recipient domain may hold more than settings.per_domain send slots (invariant 15).
        # The claimer holds at most this many rows (sending, or waiting for a place of their
        # domain): a batch's worth beyond what one domain may send. Any quick domain may
        # fill it, so one still growing its places (every row claimed is for it, at first)
        # never overflows into the database; one that has been slow keeps an eighth of the
        # room waiting, and the rest go back for a while.
        room = max(settings.concurrency, settings.batch_size)
        self._held_limit = settings.per_domain + room
        self._places = DomainPlaces(
            settings.per_domain, max_waiting=self._held_limit, slow_waiting=max(1, room // 8)
        )
        self._flight_ended: anyio.Event | None = None
        self._stopping = False

    @property
    def owner(self) -> str:
        return self.leases.owner

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def in_flight(self) -> int:
        return len(self._flights)

    # -- lifecycle ---------------------------------------------------------------------------

    def _announce(self) -> None:
        concurrency, capacity = self.settings.concurrency, self.transport.capacity
        log.info(
            "worker %s delivering (%s mode, %d sends in flight at most)",
            self.owner,
            self.settings.mode,
            concurrency,
        )
        if capacity is not None and concurrency > capacity:
            # Claims beyond the transport's connections wait for one while their lease and
            # link age; the send path rechecks them against the database, which costs a
            # round trip each, and the queue shows as commit -> send latency.
            log.warning(
                "NOTIFIER_CONCURRENCY=%d is more than the %d SMTP connections "
                "(NOTIFIER_SMTP_POOL_SIZE): claims will wait for a connection; set them equal",
                concurrency,
                capacity,
            )

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Deliver until stopped; `task_status.started()` once listening (or polling)."""
        # fast_acquire: a free slot is taken without a trip around the event loop; every
        # holder awaits I/O soon after, so none can starve the others.
        self._slots = anyio.Semaphore(self.settings.concurrency, fast_acquire=True)
        async with anyio.create_task_group() as services:
            services.start_soon(self._gate.run)
            services.start_soon(self._completer.run)
            services.start_soon(self._keep_leases)
            async with anyio.create_task_group() as sends:
                self._sends = sends
                with anyio.CancelScope() as intake_scope:
                    self._intake_scope = intake_scope
                    if self._stopping:
                        intake_scope.cancel()
                    async with anyio.create_task_group() as intake:
                        if self.settings.mode == "notify":
                            await intake.start(self.listener.run)
                            intake.start_soon(self.intake.run_retry_timer)
                        intake.start_soon(self._sweep_loop)
                        intake.start_soon(self._claim_loop)
                        self._announce()
                        self.observer.notice(events.WorkerStarted(self.owner))
                        task_status.started()
                if self._flights:
                    log.info("claiming stopped; waiting for %d sends in flight", len(self._flights))
            await self._release_unknown()
            services.cancel_scope.cancel()
        self.observer.notice(events.WorkerStopped(self.owner))
        log.info("worker %s stopped", self.owner)

    def stop(self) -> None:
        """Stop claiming now; give sends in flight the grace period, then cancel them."""
        if self._stopping:
            return
        self._stopping = True
        log.info(
            "stopping: no new claims; %.0fs grace for sends in flight", self.settings.shutdown_grace
        )
        if self._intake_scope is not None:
            self._intake_scope.cancel()
        if self._sends is not None:
            self._sends.cancel_scope.deadline = anyio.current_time() + self.settings.shutdown_grace
        if self._claim_scope is not None:
            self._claim_scope.deadline = anyio.current_time() + CLEANUP_TIMEOUT_SECONDS

    # -- finding work ------------------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        if self.settings.mode == "poll":
            while True:
                self.intake.request_sweep("poll")
                await anyio.sleep(self.settings.poll_interval)
        while True:
            self.intake.request_sweep("sweep")
            spread = random.uniform(1 - SWEEP_JITTER, 1 + SWEEP_JITTER)
            await anyio.sleep(self.settings.sweep_interval * spread)

    # -- claiming ----------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while True:
            await self.intake.wait()
            await self._room_to_hold()
            free = await self._take_slots()
            # Never more rows held (sending or waiting for a place) than the limit.
            surplus = free - max(self._held_limit - len(self._flights), 1)
            if surplus > 0:
                self._give_slots(surplus)
                free -= surplus
            if self._stopping:
                # A slot granted in the same tick as stop(): the acquire was not cancelled.
                self._give_slots(free)
                return
            try:
                wanted = free + self._beyond_slots(free)
                granted = wanted if self.send_rate is None else await self._tokens(wanted)
                if granted < free:
                    self._give_slots(free - granted)
                    free = granted
                if not granted:
                    continue
                rows = await self._claim(granted)
            except Exception as exc:
                self._give_slots(free)
                log.warning("claim failed (%s); sweeping once the database answers", exc)
                self.observer.notice(events.ClaimFailed(str(exc)))
                self.intake.request_sweep("sweep")
                await anyio.sleep(CLAIM_ERROR_BACKOFF_SECONDS)
                continue
            if self.send_rate is not None:
                # A token buys one message sent: rows another worker claimed first, or
                # settled without sending, hand theirs back.
                spent = sum(row.fate == "send" for row, _ in rows)
                await persisted(functools.partial(self.send_rate.give_back, granted - spent))
            to_send, crowded = self._sorted(rows)
            if self._stopping:
                # Answered after shutdown began: what the claim leased goes back unsent.
                for row, _, ticket in to_send:
                    if ticket is None:
                        self._places.leave(_domain_of(row))
                    else:
                        ticket.give_up()
                held = [Held(r.id, r.lease_token) for r, _, _ in to_send if r.lease_token]
                await self._release_held(held + [h for h, _ in crowded])
                to_send, crowded = [], []
            self._give_slots(free - self._launch(to_send, free))
            if crowded:
                await self._defer(crowded)

    async def _tokens(self, wanted: int) -> int:
        """Tokens of the fleet's send rate for up to `wanted` sends; when none are left,
        waits for the next one (holding no lease) and answers 0, so the loop starts over."""
        bucket = self.send_rate
        assert bucket is not None
        before = bucket.in_force
        grant = await bucket.take(wanted)
        if grant.rate != before and grant.rate is not None and bucket.rate is not None:
            self.observer.notice(events.SendRateChanged(grant.rate, bucket.rate))
        if grant.paused_until != self._paused_until:
            self._paused_until = grant.paused_until
            self.observer.notice(events.SendPaused(grant.paused_until))
            if grant.paused_until is None:
                log.info("the provider's daily quota window rolled over; sending again")
                if not bucket.limits:
                    self.send_rate = None  # kept only for the pause
        if grant.granted == 0:
            await anyio.sleep(grant.wait)
        return grant.granted

    async def _room_to_hold(self) -> None:
        """Until this worker holds fewer rows than it may (a send ends, or a wait)."""
        while len(self._flights) >= self._held_limit:
            self._flight_ended = anyio.Event()
            await self._flight_ended.wait()

    async def _take_slots(self) -> int:
        """Send slots for one claim: an idle worker takes one row at once; rows that piled
        up while every slot was busy go together, up to the batch size."""
        assert self._slots is not None
        await self._slots.acquire()
        free = 1
        while free < self.settings.batch_size:
            try:
                self._slots.acquire_nowait()
            except anyio.WouldBlock:
                break
            free += 1
        return free

    def _beyond_slots(self, free: int) -> int:
        """Rows to claim beyond the free send slots, to wait here for one: as many as may be
        sending, within what this worker may hold and one claim may take. A backlog then
        goes in claims of a batch, not of the one slot a finished send just freed (each
        claim costs a round trip and its statement, whatever its size); rows waiting here
        take their slots in order, before the next claim does."""
        if self.send_rate is not None:
            # A token is spent when its row is claimed: rows waiting here for a slot would
            # go out later in bursts, past the fleet's rate in some second.
            return 0
        room = self._held_limit - len(self._flights) - free
        return max(0, min(self.settings.concurrency, room, self.settings.batch_size - free))

    def _give_slots(self, count: int) -> None:
        assert self._slots is not None
        for _ in range(count):
            self._slots.release()

    def _sorted(
        self, rows: list[tuple[Claimed, _Claim]]
    ) -> tuple[list[tuple[Claimed, _Claim, Ticket | None]], list[tuple[Held, float]]]:
        """What to send: with its domain's place and a slot taken now (no ticket), or with a
        ticket to wait for a place without a slot; and what its crowded domain cannot take
        at all, with how long it goes back to the database for."""
        to_send: list[tuple[Claimed, _Claim, Ticket | None]] = []
        crowded: list[tuple[Held, float]] = []
        crowded_by_domain: dict[str, list[Held]] = {}
        for row, claim in rows:
            domain = _domain_of(row)
            if row.fate != "send":
                self.observer.notice(events.Settled(row.id, row.fate))
            elif self._places.take(domain):
                to_send.append((row, claim, None))
            elif (ticket := self._places.ticket(domain)) is not None:
                # Its domain has no place free: it waits for one without a slot, in line
                # from now, so other domains' mail goes on.
                to_send.append((row, claim, ticket))
            elif row.lease_token is not None:
                crowded_by_domain.setdefault(domain, []).append(Held(row.id, row.lease_token))
        for domain, held in crowded_by_domain.items():
            # One longer wait per claim that found the domain crowded, not one per row.
            delay = self._places.defer_delay(domain) * random.uniform(0.8, 1.2)
            crowded += [(h, delay) for h in held]
        return to_send, crowded

    def _launch(self, to_send: list[tuple[Claimed, _Claim, Ticket | None]], slots: int) -> int:
        """Start a send task for each row, the first placed ones with the `slots` taken for
        the claim (the rest wait for one); how many of those slots they took."""
        assert self._sends is not None
        taken = 0
        for row, claim, ticket in to_send:
            holds_slot = ticket is None and taken < slots
            taken += holds_slot
            # Named: anyio would otherwise derive a name from the function each time.
            self._sends.start_soon(
                self._deliver, row, claim, ticket, holds_slot, name=SEND_TASK_NAME
            )
        return taken

    async def _claim(self, limit: int) -> list[tuple[Claimed, _Claim]]:
        """Claim up to `limit` rows: notified (or timer-offered) ids first, else a sweep."""
        waiting = self.intake.take_ids(limit)
        if waiting:
            by_discovery: dict[Discovery, list[int]] = {}
            for outbox_id, (_, discovery) in waiting.items():
                by_discovery.setdefault(discovery, []).append(outbox_id)
            claimed: list[tuple[Claimed, _Claim]] = []
            for discovery, ids in by_discovery.items():
                if self._stopping:
                    break
                claimed += await self._timed_claim(self.leases.claim_ids(ids, discovery), discovery)
            now = time.monotonic()
            for row, _ in claimed:
                offered = waiting.get(row.id)
                self._emit_claimed(row, None if offered is None else now - offered[0])
            return claimed
        reason = self.intake.take_sweep()
        if reason is None:
            return []
        claimed = await self._timed_claim(self.leases.claim_due(limit, reason), reason)
        if len(claimed) >= limit:
            self.intake.request_sweep(reason)  # a full batch: more may be waiting
        self.observer.notice(events.Swept(self.owner, reason, len(claimed)))
        for row, _ in claimed:
            self._emit_claimed(row, None)
        return claimed

    async def _timed_claim(
        self, statement: Awaitable[list[Claimed]], discovered_by: Discovery
    ) -> list[tuple[Claimed, _Claim]]:
        # Taken before the statement is sent: the lease cannot run out before this moment
        # plus its length, whatever the network did to the reply.
        sent_at = time.monotonic()
        started = time.time_ns()
        # Shielded: once sent, the claim may commit, and then its rows are leased to this
        # worker whether or not the answer arrives. Shutdown cancelling the wait would leave
        # them leased after a clean exit (invariant 7), so the answer is awaited; stop()
        # bounds the wait, so a database that never answers cannot hold shutdown forever.
        rows: list[Claimed] | None = None
        with anyio.CancelScope(shield=True) as self._claim_scope:
            if self._stopping:
                self._claim_scope.deadline = anyio.current_time() + CLEANUP_TIMEOUT_SECONDS
            rows = await statement
        self._claim_scope = None
        if rows is None:
            raise TimeoutError(f"no answer to the claim within {CLEANUP_TIMEOUT_SECONDS:.0f}s")
        claim = record_claim_batch(
            rows, discovered_by, self.owner, started, time.time_ns(), self._traced
        )
        return [(row, _Claim(claim, sent_at)) for row in rows]

    async def _defer(self, crowded: list[tuple[Held, float]]) -> None:
        """Hand rows of a domain with as many rows waiting as may wait back uncounted,
        holding neither a slot nor a lease while that domain is busy, each due again after
        its domain's delay (growing while the domain stays crowded), and claim them then."""
        by_delay: dict[float, list[Held]] = {}
        for held, delay in crowded:
            by_delay.setdefault(round(delay, 1), []).append(held)
        for delay, batch in by_delay.items():
            answer = await persisted(functools.partial(self.leases.defer, batch, delay))
            if isinstance(answer, Exception):
                log.warning("could not hand back deliveries to a busy domain (%s)", answer)
                continue
            for held in batch:
                if held.id in answer:
                    self.intake.offer_later(held.id, delay)
                    self.observer.notice(events.Deferred(held.id, delay))

    def _emit_claimed(self, row: Claimed, waited: float | None) -> None:
        self.observer.notice(
            events.Claimed(
                self.owner, row.id, row.discovered_by, row.attempt, waited, row.verification_id
            )
        )

    # -- sending -----------------------------------------------------------------------------

    async def _deliver(
        self, row: Claimed, claim: _Claim, ticket: Ticket | None, holds_slot: bool
    ) -> None:
        """Send `row`: with its domain's place taken (no ticket) or after waiting with
        `ticket` for one, and with a send slot taken for it or after waiting for one."""
        assert row.lease_token is not None and self._slots is not None
        link_left = (row.expires_at - (row.claimed_at or row.expires_at)).total_seconds()
        flight = Flight(row, row.lease_token, claim.sent_at, link_left, claim.sent_at)
        self._flights[row.id] = flight
        domain = _domain_of(row)
        placed = ticket is None
        smtp_seconds: float | None = None
        with process_span(row, claim.trace, self.owner, self._traced) as span:
            try:
                if ticket is not None:
                    # The lease keeper renews this lease meanwhile (it is in _flights).
                    if not await ticket.wait():
                        # Its domain turned slow and keeps fewer rows waiting: this one goes
                        # back to the database for a while, holding nothing here.
                        delay = self._places.defer_delay(domain) * random.uniform(0.8, 1.2)
                        await self._defer([(Held(row.id, flight.token), delay)])
                        return
                    placed = True
                if not holds_slot:
                    # The lease keeper renews this lease meanwhile (it is in _flights).
                    await self._slots.acquire()
                    holds_slot = True
                completion = await self._attempt(flight)
                smtp_seconds = completion.smtp_seconds
            except anyio.get_cancelled_exc_class():
                # Shutdown cancelled the attempt before any body went out: hand the row back.
                if not flight.body_sent and not flight.lost:
                    await self._release_held([Held(row.id, flight.token)])
                raise
            finally:
                del self._flights[row.id]
                if self._flight_ended is not None:
                    self._flight_ended.set()
                if placed:
                    self._places.ended(domain, smtp_seconds)
                if holds_slot:
                    self._slots.release()
            if span is not None:
                span.set_attribute("notifier.outcome", completion.outcome)
                if completion.outcome not in ("sent", "verified"):
                    span.set_attribute("error.type", completion.outcome)
            await self._complete(completion)

    async def _attempt(self, flight: Flight) -> Completion:
        row = flight.row
        started = time.monotonic()
        try:
            token = self.keys.derive(row.token_key_id, row.verification_id, row.token_nonce)
            code = None
            if row.method != "link" and row.code_digits is not None:
                code = self.keys.code(
                    row.token_key_id, row.verification_id, row.token_nonce, row.code_digits
                )
        except UnknownKeyError as exc:
            # The API may already have the new secret while this worker does not (a rollout
            # in progress): retry until the link expires, loudly, rather than fail it.
            log.error(
                "delivery %d: its link was made with token key %s, which this worker's "
                "NOTIFIER_TOKEN_SECRET lacks; retrying until the link expires. Give every "
                "worker the API's secrets.",
                row.id,
                exc.key_id,
            )
            self.observer.notice(events.UnknownTokenKey(row.id, exc.key_id))
            return self._ended(
                flight,
                started,
                "transient",
                retry=True,
                detail=f"{exc}; retried until the link expires",
            )
        # An ASCII local part at an internationalised domain goes out with the punycode
        # domain, so any server takes it; only a non-ASCII local part needs SMTPUTF8.
        recipient, _ = envelope_recipient(row.email)
        message = self.templates.compose(
            message_id=row.message_id,
            sender=self.mail_from,
            recipient=recipient,
            link=f"{self.public_url}/verify?token={token}",
            expires_at=row.expires_at,
            purpose=row.purpose,
            now=datetime.now(UTC),
            issued_at=row.issued_at,
            locale=row.locale,
            method=row.method,
            code=code,
            code_expires_at=row.code_expires_at,
        )
        if self.bounce_domain is not None:
            message = dataclasses.replace(
                message,
                return_path=verp.return_path(self.keys, row.id, self.bounce_domain),
                envelope_id=str(row.id),
            )
        gate = SendGate(flight, self.settings.lease_seconds, self._database_check)
        with (
            child_span("send smtp", self._send_attributes) as send_span,
            anyio.CancelScope() as scope,
        ):
            flight.scope = scope
            result = await self.transport.send(message, gate)
            if send_span is not None:
                send_span.set_attribute("notifier.outcome", result.outcome)
                if result.code is not None:
                    send_span.set_attribute("notifier.smtp.reply_code", result.code)
                if result.outcome not in ("sent", "aborted"):
                    send_span.set_attribute("error.type", result.outcome)
        flight.scope = None
        if scope.cancelled_caught:
            return self._ended(
                flight,
                started,
                "lease_lost",
                detail="the lease was lost before the message was sent",
            )
        return self._judged(flight, started, result, gate.answer)

    async def _database_check(self, flight: Flight) -> Sendability | None:
        """The lease and the verification as the database has them (batched with others);
        None if it cannot say, which sends nothing."""
        try:
            answer = await self._gate.submit(Held(flight.row.id, flight.token))
        except Exception as exc:
            log.warning("cannot confirm the lease on %d before sending (%s)", flight.row.id, exc)
            return None
        return answer

    def _judged(
        self, flight: Flight, started: float, result: SendResult, gate: Sendability | None
    ) -> Completion:
        """The completion the transport's result and the gate's answer call for
        (outcomes.judge decides; this records it)."""
        judgement = judge(result.outcome, result.refusal, gate)
        if judgement.outcome == "sent":
            self.throttle.sent()
        if judgement.configuration_problem:
            self.observer.notice(events.ConfigurationProblem(flight.row.id, result.code))
        if result.outcome == "aborted" and not judgement.retry:
            # The gate said no: the mail server was told nothing worth keeping.
            gone = judgement.outcome == "lease_lost"
            detail = "the lease was gone at the pre-send check" if gone else None
            return self._ended(flight, started, judgement.outcome, detail=detail)
        return self._ended(
            flight,
            started,
            judgement.outcome,
            retry=judgement.retry,
            result=result,
            suppress=judgement.suppress,
        )

    def _ended(
        self,
        flight: Flight,
        started: float,
        outcome: AttemptOutcome,
        *,
        retry: bool = False,
        detail: str | None = None,
        result: SendResult | None = None,
        suppress: bool = False,
    ) -> Completion:
        """How the attempt on `flight` ended, with the transport's evidence if it has any."""
        row = flight.row
        provider_message_id = None if result is None else result.provider_message_id
        if result is not None:
            # Stored as support staff read it in a bounce: "550 5.1.1 <u***@x.com>: ...".
            # A server may echo the address in a shape no pattern finds; notifier knows
            # every shape it sent, and each is replaced.
            known = spellings(row.email)
            if detail is None:
                detail = redact_spellings(f"{result.code or ''} {result.reply or ''}", known)
                detail = detail.strip() or None
            if provider_message_id is not None:
                provider_message_id = redact_spellings(provider_message_id, known)
        return Completion(
            id=row.id,
            token=flight.token,
            attempt=row.attempt,
            discovered_by=row.discovered_by,
            claimed_at=row.claimed_at,
            duration_ms=(time.monotonic() - started) * 1000,
            outcome=outcome,
            retry_delay=self._retry_delay(outcome, row.attempt) if retry else 0.0,
            smtp_code=None if result is None else result.code,
            detail=detail,
            provider_message_id=provider_message_id,
            body_sent=False if result is None else result.body_sent,
            smtp_seconds=None if result is None else result.duration,
            suppress=folded(row.email) if suppress else None,
            quota_spent=result is not None and result.quota_spent,
        )

    def _retry_delay(self, outcome: AttemptOutcome, attempt: int) -> float:
        if outcome == "throttled":
            return self.throttle.throttled()
        return self.backoff.delay(attempt)

    async def _complete(self, completion: Completion) -> None:
        # Persisted (shielded, retried): a result the mail server already gave must reach
        # the database, even during shutdown, or the row would be sent again after its
        # lease expires.
        settle = {"notifier.outcome": completion.outcome, "messaging.operation.type": "settle"}
        with child_span(f"settle {DESTINATION}", settle) as span:
            done = await persisted(lambda: self._completer.submit(completion))
            if isinstance(done, Exception):
                log.error(
                    "could not record the %s outcome of delivery %d (%s); its lease "
                    "will expire and it will be retried",
                    completion.outcome,
                    completion.id,
                    done,
                )
                self.observer.notice(events.CompletionFailed(completion.id))
                self._unrecorded.add(completion.id)
                return
            if span is not None:
                span.set_attribute("notifier.status", done.status or "unchanged")
                span.set_attribute("notifier.lease_held", done.lease_held)
        if not done.lease_held:
            log.warning(
                "delivery %d: lease lost before completion; the %s result changed nothing "
                "and was recorded as ambiguous",
                completion.id,
                completion.outcome,
            )
            self.observer.notice(events.StaleCompletion(completion.id, completion.outcome))
            return
        if done.status == "pending":
            self.intake.offer_later(completion.id, completion.retry_delay)
        if completion.quota_spent:
            await self._pause()
        bucket = self.send_rate
        if completion.outcome == "throttled" and bucket is not None and bucket.rate is not None:
            rate = await persisted(bucket.throttled)
            if isinstance(rate, float):
                log.warning(
                    "the mail provider throttled; the fleet's send rate is now %.1f/s of %g/s",
                    rate,
                    bucket.rate,
                )
                self.observer.notice(events.SendRateChanged(rate, bucket.rate))
        self.observer.notice(
            events.Completed(
                self.owner,
                completion.id,
                completion.outcome,
                done.status,
                completion.attempt,
                completion.smtp_seconds,
                completion.detail,
            )
        )

    async def _pause(self) -> None:
        """The provider's daily quota is spent: every worker stops claiming until the UTC day
        rolls over (the rows wait unleased; their links' expiry still applies)."""
        if self.send_rate is None:
            self.send_rate = SendRate(self.pool, None)
        until = await persisted(self.send_rate.pause)
        if isinstance(until, Exception):
            log.warning("could not record the provider's spent daily quota (%s)", until)
            return
        if until != self._paused_until:
            self._paused_until = until
            log.error(
                "the mail provider's daily sending quota is spent: every worker pauses until "
                "%s, when its window rolls over (raise the quota with the provider, or set "
                "NOTIFIER_DAILY_QUOTA to spread the day's sends)",
                until.isoformat(),
            )
            self.observer.notice(events.SendPaused(until))

    async def _release_unknown(self) -> None:
        """Hand back leases this worker holds without knowing it, before it exits.

        A claim that committed on the server but whose answer was lost (a dropped
        connection, a timeout) leaves rows leased to this worker, which never saw their
        tokens and so sent nothing: they go back uncounted rather than wait out their lease.
        """
        held: list[Held] | None = None
        deadline = anyio.current_time() + CLEANUP_TIMEOUT_SECONDS
        with anyio.CancelScope(shield=True, deadline=deadline):
            try:
                held = await self.leases.held_here()
            except Exception as exc:
                log.warning("could not look for leases left behind (%s)", exc)
        if held is None:
            return
        unknown = [h for h in held if h.id not in self._unrecorded]
        if unknown:
            log.warning(
                "handing back %d deliveries leased by a claim whose answer was lost: %s",
                len(unknown),
                ", ".join(str(h.id) for h in unknown),
            )
            await self._release_held(unknown)

    async def _release_held(self, held: list[Held]) -> None:
        """Hand rows back uncounted, before anything was sent.

        Persisted like a completion: shutdown often meets a database that is restarting
        too, and a row left leased waits out its lease before anyone sends it.
        """
        if not held:
            return
        answer = await persisted(lambda: self.leases.release(held))
        if isinstance(answer, Exception):
            log.warning(
                "could not release deliveries %s (%s); their leases will expire",
                ", ".join(str(h.id) for h in held),
                answer,
            )
            return
        for h in held:
            self.observer.notice(events.Released(h.id))

    # -- leases ------------------------------------------------------------------------------

    async def _keep_leases(self) -> None:
        renew_after = self.settings.lease_seconds * RENEW_AFTER_FRACTION
        while True:
            await anyio.sleep(renew_after / 4)
            now = time.monotonic()
            due = [
                f
                for f in self._flights.values()
                if not f.lost and now - f.renewed_at >= renew_after
            ]
            if not due:
                continue
            try:
                renewed = await self.leases.renew([Held(f.row.id, f.token) for f in due])
            except Exception as exc:
                log.warning("lease renewal failed (%s); will retry", exc)
                continue
            for flight in due:
                if flight.row.id in renewed:
                    flight.renewed_at = now
                    continue
                flight.lost = True
                self.observer.notice(events.LeaseLost(flight.row.id, flight.body_sent))
                log.warning(
                    "delivery %d: lease lost while in flight%s",
                    flight.row.id,
                    "" if flight.body_sent else "; abandoning the send",
                )
                if not flight.body_sent and flight.scope is not None:
                    flight.scope.cancel()
