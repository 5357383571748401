"""The invariants of DESIGN.md, checked from outside: the mail server's log against the database.

Every SMTP transaction is attributed to the lease it was sent under: the listener it came in
on names the worker slot, the slot's process alive at that moment names the lease owner, and
the owner's lease on that row whose claim window holds the moment is the one. Everything
else follows from that attribution and the attempt records.
"""

from __future__ import annotations

import email
import email.policy
import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path

from tests.soak.evidence import EXPIRED, RELEASED, Evidence, Lease, Row
from tests.soak.faults import FaultInjector
from tests.soak.load import LoadStats
from tests.soak.processes import Incarnation
from tests.soak.settings import RECIPIENT_DOMAIN, SoakSettings
from tests.support.smtp_server import Fault, Transaction

# Slack between the database's clock and the soak's (one machine, one clock: the slack only
# covers a statement's start time versus its effect), seconds.
CLOCK_SLACK_SECONDS = 0.25
# Slack for comparing two database timestamps, seconds.
DB_SLACK_SECONDS = 0.001
# A process's start and end as the soak saw them are this close to the truth, seconds.
PROCESS_SLACK_SECONDS = 0.5
# At most this many examples are kept per violated check.
EXAMPLES_PER_CHECK = 8

TERMINAL = frozenset({"sent", "failed", "expired"})
TOKEN_IN_LINK = re.compile(r"[?&]token=([0-9a-f]{8}\.[A-Za-z0-9_-]{43})")
MAC_LENGTH = 43
TOKEN_CHAR_RUN = re.compile(rb"[A-Za-z0-9_-]{43,}")
RAW_ADDRESS = re.compile(rb"u\d+\.[0-9a-z]+@" + re.escape(RECIPIENT_DOMAIN.encode()), re.IGNORECASE)

# The checks, in the order the report lists them, with what each one means.
CHECKS: dict[str, str] = {
    "requests_accepted": "every request accepted by the API, exactly one row each",
    "all_terminal": "every row sent, failed or expired after the drain (none lost or stuck)",
    "sent_were_received": "every sent row received (kept) under its Message-ID, with a 2xx",
    "permanent_got_5xx": "every permanent failure got a 5xx from the server",
    "one_live_lease": "no Message-ID sent by two live leases at once; every lease ended once",
    "receipts_attributed": "every server transaction falls inside a lease of its sender",
    "outcomes_match_server": "recorded outcomes agree with what the server answered",
    "duplicates_explained": "every duplicate receipt follows an unknown outcome or expired lease",
    "attempts_bounded": "attempts never exceed the maximum, numbered 1..n with no gaps",
    "no_raw_tokens": "no raw token in any process log, the server log, or the tables",
    "addresses_redacted": "no raw recipient address in any log line (invariant 9)",
    "processes_behaved": "no crash; SIGTERM exits 0 within grace, leaving nothing leased",
    "faults_injected": "every planned kind of fault was injected at least once",
}


@dataclass(slots=True)
class Findings:
    """Violations by check, and the counts the report shows."""

    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    counts: Counter[str] = field(default_factory=Counter)
    duplicate_causes: Counter[str] = field(default_factory=Counter)
    smtp_faults: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    failure_reasons: Counter[str] = field(default_factory=Counter)
    tokens_seen: int = 0

    def violate(self, check: str, example: str) -> None:
        self.counts[f"violations.{check}"] += 1
        if len(self.violations[check]) < EXAMPLES_PER_CHECK:
            self.violations[check].append(example)

    def total(self, check: str) -> int:
        return self.counts[f"violations.{check}"]

    @property
    def ok(self) -> bool:
        return not any(self.total(c) for c in CHECKS)


@dataclass(slots=True)
class Attribution:
    """Which lease each transaction was sent under (None: no lease explains it)."""

    lease_of: dict[int, Lease | None]  # id(transaction) -> lease
    by_lease: dict[object, list[Transaction]]  # lease token -> its transactions, in order


def check_all(
    settings: SoakSettings,
    evidence: Evidence,
    transactions: list[Transaction],
    workers: list[Incarnation],
    api: list[Incarnation],
    load: LoadStats,
    faults: FaultInjector,
    drained_in: float | None,
    haystacks: list[Path],
) -> Findings:
    findings = Findings()
    rows_by_email = {row.email.lower(): row for row in evidence.rows}
    _check_requests(findings, evidence, load, settings)
    _check_terminal(findings, evidence, drained_in)
    attribution = _attribute(findings, evidence, transactions, workers, rows_by_email)
    _check_leases(findings, evidence, settings.lease_seconds)
    _check_sent_and_permanent(findings, evidence, transactions, attribution, rows_by_email)
    _check_outcomes(findings, evidence, attribution)
    _check_duplicates(findings, evidence, transactions, attribution, workers, rows_by_email)
    _check_attempts(findings, evidence)
    _check_secrets(findings, transactions, haystacks)
    _check_processes(findings, workers, api, faults)
    _count_smtp_faults(findings, transactions)
    _check_faults_injected(findings, faults, settings)
    for row in evidence.rows:
        findings.statuses[row.status] += 1
        if row.status != "sent":
            findings.failure_reasons[f"{row.status}: {row.last_outcome}"] += 1
    return findings


# -- the API and the rows ------------------------------------------------------------------


def _check_requests(
    findings: Findings, evidence: Evidence, load: LoadStats, settings: SoakSettings
) -> None:
    check = "requests_accepted"
    ids = {row.verification_id for row in evidence.rows}
    for request in load.requests:
        if request.refused is not None:
            findings.violate(check, f"request {request.index} refused: {request.refused}")
        elif request.verification_id is None:
            findings.violate(
                check, f"request {request.index} never accepted ({request.tries} tries)"
            )
        elif request.verification_id not in ids:
            findings.violate(
                check,
                f"request {request.index} accepted as {request.verification_id}, which has no row",
            )
    if len(evidence.rows) != settings.count:
        findings.violate(check, f"{len(evidence.rows)} rows for {settings.count} requests")


def _check_terminal(findings: Findings, evidence: Evidence, drained_in: float | None) -> None:
    stuck = [row for row in evidence.rows if row.status not in TERMINAL]
    for row in stuck:
        findings.violate(
            "all_terminal",
            f"row {row.id} is {row.status} (attempts {row.attempts}, last {row.last_outcome}, "
            f"owner {row.lease_owner})",
        )
    if drained_in is None and not stuck:
        findings.violate("all_terminal", "the drain timed out although every row is terminal now")


# -- attribution ---------------------------------------------------------------------------


def _attribute(
    findings: Findings,
    evidence: Evidence,
    transactions: list[Transaction],
    workers: list[Incarnation],
    rows_by_email: dict[str, Row],
) -> Attribution:
    check = "receipts_attributed"
    by_slot: dict[int, list[Incarnation]] = defaultdict(list)
    for incarnation in workers:
        by_slot[incarnation.slot].append(incarnation)
    attribution = Attribution({}, defaultdict(list))
    for tx in transactions:
        row = rows_by_email.get(tx.recipient.lower())
        if row is None:
            findings.violate(check, f"mail for {tx.recipient}, which no row names")
            attribution.lease_of[id(tx)] = None
            continue
        if tx.message_id is not None and tx.message_id != row.message_id:
            findings.violate(
                check, f"row {row.id}: body carried {tx.message_id}, not {row.message_id}"
            )
        senders = [i for i in by_slot[tx.listener] if i.alive_at(tx.rcpt_at, PROCESS_SLACK_SECONDS)]
        owners = {i.owner for i in senders if i.owner is not None}
        lease = _lease_for(evidence.leases_by_row.get(row.id, []), owners, tx)
        attribution.lease_of[id(tx)] = lease
        if lease is None:
            findings.violate(
                check,
                f"row {row.id}: a transaction at {tx.rcpt_at:.3f} on slot {tx.listener} "
                f"({tx.fault}, body={'yes' if tx.body_at else 'no'}) is inside no lease of "
                f"{sorted(owners) or 'any live process'}",
            )
            continue
        attribution.by_lease[lease.token].append(tx)
        if tx.body_at is not None:
            findings.counts["bodies_received"] += 1
            said_none = [r for r in lease.completions if not r.body_sent]
            if lease.released or (said_none and not any(r.body_sent for r in lease.records)):
                findings.violate(
                    check,
                    f"row {row.id}: the server read a body under lease {lease.token} whose "
                    f"attempt says none was sent ({', '.join(r.outcome for r in said_none)})",
                )
            if tx.body_at > lease.live_end + CLOCK_SLACK_SECONDS:
                # The gate said yes while the lease was live; the body finished after the
                # row was taken over. Counted; the duplicate it may cause is checked later.
                findings.counts["bodies_after_lease_end"] += 1
    return attribution


def _lease_for(leases: list[Lease], owners: set[str], tx: Transaction) -> Lease | None:
    """The sender's lease on the row whose window [claim, last record] holds the moment the
    transaction began. Windows of one owner do not overlap, so the closest one wins; the
    slack only absorbs the gap between a statement's start time and its effect."""
    mine = [lease for lease in leases if lease.owner in owners]
    best: Lease | None = None
    best_distance = CLOCK_SLACK_SECONDS
    for lease in mine:
        start = lease.claimed_at
        if start is None:
            continue
        distance = max(start - tx.rcpt_at, tx.rcpt_at - lease.window_end, 0.0)
        if distance <= best_distance:
            best, best_distance = lease, distance
    if best is not None:
        return best
    # A released lease records no claim time; it sent no body, but may have said RCPT TO.
    released = [
        lease
        for lease in mine
        if lease.claimed_at is None and tx.rcpt_at <= lease.window_end + CLOCK_SLACK_SECONDS
    ]
    return min(released, key=lambda lease: lease.window_end) if released else None


# -- leases --------------------------------------------------------------------------------


def _check_leases(findings: Findings, evidence: Evidence, lease_seconds: float) -> None:
    """Each lease ends once; a row's leases follow one another. A takeover of an expired
    lease must come at least lease_seconds after that lease's claim: the claim set
    lease_until = claimed_at + lease_seconds on the same clock, and renewals only extend it,
    so an earlier takeover took a lease that was still live."""
    check = "one_live_lease"
    for lease in evidence.leases.values():
        endings = lease.endings
        if len(endings) > 1:
            findings.violate(
                check,
                f"row {lease.outbox_id}: lease {lease.token} ended {len(endings)} times while "
                f"held ({', '.join(r.outcome for r in endings)})",
            )
        elif not endings and not lease.current:
            findings.violate(
                check, f"row {lease.outbox_id}: lease {lease.token} has no recorded end"
            )
        claims = {r.claimed_at for r in lease.records if r.claimed_at is not None}
        if len(claims) > 1:
            findings.violate(
                check, f"row {lease.outbox_id}: lease {lease.token} has {len(claims)} claim times"
            )
    for outbox_id, leases in evidence.leases_by_row.items():
        timed = [lease for lease in leases if lease.claimed_at is not None]
        for earlier, later in itertools.pairwise(timed):
            assert later.claimed_at is not None
            if earlier.live_end > later.claimed_at + DB_SLACK_SECONDS:
                findings.violate(
                    check,
                    f"row {outbox_id}: lease {later.token} was claimed "
                    f"{earlier.live_end - later.claimed_at:.3f}s before lease {earlier.token} "
                    f"ended ({earlier.ending.outcome if earlier.ending else 'open'})",
                )
            assert earlier.claimed_at is not None
            early = earlier.claimed_at + lease_seconds - later.claimed_at
            if _ended_as(earlier, EXPIRED) and early > DB_SLACK_SECONDS:
                findings.violate(
                    check,
                    f"row {outbox_id}: lease {earlier.token} was taken over {early:.3f}s "
                    "before it could have expired",
                )
        findings.counts["leases"] += len(leases)
        findings.counts["leases_expired"] += sum(
            1 for lease in leases if lease.ending is not None and lease.ending.outcome == EXPIRED
        )
        findings.counts["stale_completions"] += sum(len(lease.stale) for lease in leases)


# -- what the server said ------------------------------------------------------------------


def _check_sent_and_permanent(
    findings: Findings,
    evidence: Evidence,
    transactions: list[Transaction],
    attribution: Attribution,
    rows_by_email: dict[str, Row],
) -> None:
    kept_ids = Counter(tx.message_id for tx in transactions if tx.kept and tx.message_id)
    for row in evidence.rows:
        leases = evidence.leases_by_row.get(row.id, [])
        if row.status == "sent" and row.last_outcome == "sent":
            if kept_ids[row.message_id] == 0:
                findings.violate(
                    "sent_were_received",
                    f"row {row.id} is sent; the server never kept {row.message_id}",
                )
            deciding = [lease for lease in leases if _ended_as(lease, "sent")]
            if not any(
                _code_class(tx) == 2
                for lease in deciding
                for tx in attribution.by_lease[lease.token]
            ):
                findings.violate(
                    "sent_were_received",
                    f"row {row.id}: its 'sent' attempt has no 2xx from the server",
                )
        if row.last_outcome == "permanent":
            deciding = [lease for lease in leases if _ended_as(lease, "permanent")]
            codes = [r.smtp_code for lease in deciding for r in lease.endings]
            server = [
                _code_class(tx) for lease in deciding for tx in attribution.by_lease[lease.token]
            ]
            if 5 not in server or not any(c is not None and 500 <= c < 600 for c in codes):
                findings.violate(
                    "permanent_got_5xx",
                    f"row {row.id} failed permanently; recorded codes {codes}, server answered "
                    f"{[f'{c}xx' for c in server if c]}",
                )
    # And the other way round: a 5xx under a held lease fails the row.
    for tx in transactions:
        if _code_class(tx) != 5:
            continue
        lease = attribution.lease_of.get(id(tx))
        owner_row = rows_by_email.get(tx.recipient.lower())
        if lease is None or owner_row is None or lease.ending is None:
            continue
        if lease.ending.outcome not in ("permanent", EXPIRED) and lease.ending.lease_held:
            findings.violate(
                "permanent_got_5xx",
                f"row {owner_row.id}: the server answered 5xx under lease {lease.token}, which "
                f"recorded {lease.ending.outcome}",
            )


def _check_outcomes(findings: Findings, evidence: Evidence, attribution: Attribution) -> None:
    check = "outcomes_match_server"
    for lease in evidence.leases.values():
        ending = lease.ending
        txs = attribution.by_lease.get(lease.token, [])
        if ending is None or not txs or ending.outcome in (EXPIRED, RELEASED):
            continue
        last = txs[-1]
        kept_and_told = last.kept and _code_class(last) == 2
        if ending.outcome in ("transient", "permanent") and kept_and_told:
            findings.violate(
                check,
                f"row {lease.outbox_id}: the server kept the message and answered "
                f"{last.reply!r}; the attempt recorded {ending.outcome}",
            )
        if ending.outcome == "sent" and not last.kept:
            findings.violate(
                check,
                f"row {lease.outbox_id}: recorded sent; the server did not keep it "
                f"({last.fault}, {last.reply or last.rcpt_reply!r})",
            )
        if ending.outcome == "unknown":
            findings.counts["unknown_outcomes"] += 1
            if not last.kept:
                findings.violate(
                    check, f"row {lease.outbox_id}: recorded unknown; the server refused it"
                )


def _check_duplicates(
    findings: Findings,
    evidence: Evidence,
    transactions: list[Transaction],
    attribution: Attribution,
    workers: list[Incarnation],
    rows_by_email: dict[str, Row],
) -> None:
    check = "duplicates_explained"
    kept: dict[str, list[Transaction]] = defaultdict(list)
    for tx in transactions:
        if tx.kept and tx.message_id:
            kept[tx.message_id].append(tx)
    killed_owners = {i.owner for i in workers if i.ending == "killed" and i.owner is not None}
    for message_id, receipts in kept.items():
        # In the order of the leases they were sent under: a worker that stalled after its
        # pre-send check can deliver its body after its successor's, and the lease claimed
        # first is the one whose ending must explain the second receipt.
        receipts.sort(
            key=lambda tx: (
                _claim_order(attribution.lease_of.get(id(tx))),
                tx.body_at or tx.rcpt_at,
            )
        )
        findings.counts["messages_kept"] += 1
        for earlier, later in itertools.pairwise(receipts):
            findings.counts["duplicates"] += 1
            cause = _duplicate_cause(
                attribution.lease_of.get(id(earlier)),
                attribution.lease_of.get(id(later)),
                earlier,
                killed_owners,
            )
            if cause.startswith("UNEXPLAINED"):
                row = rows_by_email.get(earlier.recipient.lower())
                findings.violate(check, f"row {row.id if row else '?'} {message_id}: {cause}")
            findings.duplicate_causes[cause] += 1
    _check_concurrent(findings, transactions, attribution)


def _claim_order(lease: Lease | None) -> float:
    if lease is None or lease.claimed_at is None:
        return float("inf")
    return lease.claimed_at


def _duplicate_cause(
    earlier_lease: Lease | None,
    later_lease: Lease | None,
    earlier: Transaction,
    killed_owners: set[str],
) -> str:
    if earlier_lease is None or later_lease is None:
        return "UNEXPLAINED: a receipt no lease explains"
    if earlier_lease.token == later_lease.token:
        return "UNEXPLAINED: one attempt delivered twice"
    ending = earlier_lease.ending
    if ending is None:
        return "UNEXPLAINED: the earlier lease never ended"
    if ending.outcome == "unknown":
        if earlier.fault is Fault.DROP_AFTER_DATA:
            return "unknown outcome: connection dropped after the body"
        return "unknown outcome: no reply in time"
    if ending.outcome == EXPIRED:
        stale = earlier_lease.stale
        if earlier_lease.owner in killed_owners and not stale:
            return "expired lease: worker SIGKILLed after the server kept it"
        if stale:
            return f"expired lease: worker lost its lease, then recorded {stale[0].outcome}"
        return "expired lease: worker stopped without completing"
    return f"UNEXPLAINED: the earlier attempt recorded {ending.outcome} while holding its lease"


def _check_concurrent(
    findings: Findings, transactions: list[Transaction], attribution: Attribution
) -> None:
    """Two transactions of one message open at once under two different leases: counted;
    a violation only if both leases were live during the overlap."""
    by_message: dict[str, list[Transaction]] = defaultdict(list)
    for tx in transactions:
        if tx.body_at is not None and tx.message_id:
            by_message[tx.message_id].append(tx)
    for message_id, txs in by_message.items():
        txs.sort(key=lambda tx: tx.rcpt_at)
        for i, a in enumerate(txs):
            for b in txs[i + 1 :]:
                if b.rcpt_at >= a.ended_at:
                    break
                la, lb = attribution.lease_of.get(id(a)), attribution.lease_of.get(id(b))
                if la is None or lb is None or la.token == lb.token:
                    continue
                findings.counts["concurrent_sends"] += 1
                start = max(b.rcpt_at, la.claimed_at or 0.0, lb.claimed_at or 0.0)
                end = min(a.ended_at, b.ended_at, la.live_end, lb.live_end)
                if start < end - CLOCK_SLACK_SECONDS:
                    findings.violate(
                        "one_live_lease",
                        f"{message_id} was being sent under leases {la.token} and {lb.token}, "
                        f"both live, for {end - start:.3f}s",
                    )


# -- attempts ------------------------------------------------------------------------------


def _check_attempts(findings: Findings, evidence: Evidence) -> None:
    check = "attempts_bounded"
    for row in evidence.rows:
        counted = sorted(
            lease.attempt for lease in evidence.leases_by_row.get(row.id, []) if not lease.released
        )
        if row.attempts > row.max_attempts:
            findings.violate(check, f"row {row.id}: {row.attempts} attempts > {row.max_attempts}")
        if counted != list(range(1, row.attempts + 1)):
            findings.violate(
                check,
                f"row {row.id}: attempts {row.attempts}, but its leases are numbered {counted}",
            )
        findings.counts[f"attempts.{row.attempts}"] += 1


# -- secrets -------------------------------------------------------------------------------


def _check_secrets(
    findings: Findings, transactions: list[Transaction], haystacks: list[Path]
) -> None:
    macs: set[bytes] = set()
    for tx in transactions:
        if tx.content is None:
            continue
        token = link_token(tx.content)
        if token is None:
            findings.violate("no_raw_tokens", f"a message to {tx.recipient} carries no link")
            continue
        macs.add(token.partition(".")[2].encode())
    findings.tokens_seen = len(macs)
    for path in haystacks:
        data = path.read_bytes()
        for line_number, _hit in _token_hits(data, macs):
            findings.violate("no_raw_tokens", f"{path.name}:{line_number} holds a raw token")
        if path.suffix == ".log":
            for found in RAW_ADDRESS.finditer(data):
                line_number = data.count(b"\n", 0, found.start()) + 1
                findings.violate(
                    "addresses_redacted",
                    f"{path.name}:{line_number} holds {found.group().decode()}",
                )


def link_token(content: bytes) -> str | None:
    """The token in the verification link of a message's text part."""
    message = email.message_from_bytes(content, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    part = message.get_body(preferencelist=("plain",))
    if part is None:
        return None
    assert isinstance(part, EmailMessage)
    found = TOKEN_IN_LINK.search(part.get_content())
    return found.group(1) if found else None


def _token_hits(data: bytes, macs: set[bytes]) -> Iterable[tuple[int, bytes]]:
    for run in TOKEN_CHAR_RUN.finditer(data):
        text = run.group()
        for offset in range(len(text) - MAC_LENGTH + 1):
            if text[offset : offset + MAC_LENGTH] in macs:
                yield data.count(b"\n", 0, run.start()) + 1, text
                break


# -- processes and faults ------------------------------------------------------------------


def _check_processes(
    findings: Findings, workers: list[Incarnation], api: list[Incarnation], faults: FaultInjector
) -> None:
    check = "processes_behaved"
    for incarnation in [*workers, *api]:
        if incarnation.ending == "crashed":
            findings.violate(
                check,
                f"{incarnation.name} (pid {incarnation.pid}) exited "
                f"{incarnation.returncode} on its own; see {incarnation.log_path.name}",
            )
    for problem in faults.problems:
        findings.violate(check, problem)


def _count_smtp_faults(findings: Findings, transactions: list[Transaction]) -> None:
    for tx in transactions:
        findings.counts["smtp_transactions"] += 1
        if tx.fault in (Fault.RCPT_4XX, Fault.RCPT_5XX) or (
            tx.fault is not Fault.ACCEPT and tx.body_at is not None
        ):
            findings.smtp_faults[str(tx.fault)] += 1
        if tx.kept:
            findings.counts["smtp_kept"] += 1


def _check_faults_injected(
    findings: Findings, faults: FaultInjector, settings: SoakSettings
) -> None:
    kinds = Counter(event.kind for event in faults.events)
    database_fault = "pg_failover" if settings.topology == "failover" else "pg_restart"
    planned = ["sigkill", "sigterm", "listen_kill", database_fault]
    if settings.stall_seconds > 0:
        planned.append("sigstop")
    for kind in planned:
        if kinds[kind] == 0:
            findings.violate("faults_injected", f"no {kind} was injected")
    for fault, rate in settings.smtp_faults.items():
        if rate > 0 and findings.smtp_faults[str(fault)] == 0:
            findings.violate("faults_injected", f"the server never applied {fault}")


def _ended_as(lease: Lease, outcome: str) -> bool:
    return lease.ending is not None and lease.ending.outcome == outcome


def _code_class(tx: Transaction) -> int | None:
    code = tx.reply_code
    return None if code is None else code // 100
