-- Why: a claim of a few rows and their completion each cost the database about a
-- millisecond of CPU, most of it planning: both statements were planned again on every call
-- (a custom plan for each new set of parameters), and without statistics (a table just
-- filled, autovacuum not yet round) the claim chose to read every due row through the
-- partial index of pending rows and filter them by id, so each claim cost in proportion to
-- the backlog. At the default batch of eight that made PostgreSQL the drain's limit.
--
-- claim_v3 and complete_v1 run those statements inside plpgsql with one plan each per
-- session, made once and kept (plan_cache_mode = force_generic_plan), and with sequential
-- scans ruled out (enable_seqscan = off) so that plan reaches rows through the primary keys
-- whatever size the tables had when it was made. Every statement in them names its rows by
-- id, so no other plan is ever right. Nothing else changes: claim_v3 is claim_v2 (0010) with
-- the caller's candidate lock moved inside, and complete_v1 is the complete_attempts
-- statement of the previous release, case for case. claim_v2 stays, unchanged, for workers
-- of the previous release still running during a rollout.

CREATE FUNCTION notifier.claim_v3(
    candidate_ids bigint[], owner text, lease_seconds double precision, discovery text
) RETURNS TABLE (
    id bigint, status text, lease_token uuid, attempts integer, max_attempts integer,
    message_id text, verification_id uuid, discovered_by text, traceparent text,
    tracestate text, fate text, previous_status text, user_id text, email text,
    purpose text, token_key_id text, token_nonce bytea, expires_at timestamptz,
    claimed_at timestamptz, locale text, issued_at timestamptz
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    locked bigint[];
BEGIN
    -- Claimable: due pending rows, or sending rows whose worker let the lease run out.
    -- SKIP LOCKED: a row another worker is claiming right now is theirs. The test is a CASE,
    -- not an OR of status tests, so no partial index matches it: the rows are found by id.
    -- A caller that locked its candidates already (the sweep) takes no second lock.
    SELECT array_agg(c.id ORDER BY c.id) INTO locked
    FROM (
        SELECT o.id
        FROM notifier.email_outbox o
        WHERE o.id = ANY(candidate_ids)
          AND CASE o.status WHEN 'pending' THEN o.next_attempt_at <= now()
                            WHEN 'sending' THEN o.lease_until < now()
                            ELSE false END
        ORDER BY o.id
        FOR UPDATE SKIP LOCKED
    ) c;
    IF locked IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH fated AS (
        -- What each candidate becomes. Only a live verification is sent; one that expired,
        -- was superseded or was verified meanwhile is settled without a send, and a lease
        -- that ran out on the last allowed attempt fails the row instead of retrying forever.
        SELECT o.id, o.status AS previous_status, o.lease_owner AS previous_owner,
               o.lease_token AS previous_token, o.attempts AS previous_attempts,
               o.discovered_by AS previous_discovery, o.claimed_at AS previous_claimed_at,
               v.user_id, v.email, v.purpose, v.token_key_id, v.token_nonce, v.expires_at,
               v.locale, v.created_at AS issued_at,
               -- Mirrors notifier.outcomes.claim_fate, case for case (and
               -- tests/integration/test_outcomes_sql.py runs both over every case).
               CASE
                   WHEN v.verified_at IS NOT NULL THEN 'verified'
                   WHEN v.superseded_at IS NOT NULL THEN 'superseded'
                   WHEN v.expires_at <= now() THEN 'expired'
                   WHEN o.attempts >= o.max_attempts THEN 'exhausted'
                   ELSE 'send'
               END AS fate
        FROM notifier.email_outbox o
        JOIN notifier.verifications v ON v.id = o.verification_id
        WHERE o.id = ANY(locked)
    ), claimed AS (
        UPDATE notifier.email_outbox o SET
            status = CASE f.fate WHEN 'send' THEN 'sending' WHEN 'verified' THEN 'sent'
                                 WHEN 'exhausted' THEN 'failed' ELSE 'expired' END,
            attempts = o.attempts + CASE WHEN f.fate = 'send' THEN 1 ELSE 0 END,
            lease_owner = CASE WHEN f.fate = 'send' THEN owner END,
            lease_token = CASE WHEN f.fate = 'send' THEN gen_random_uuid() END,
            lease_until = CASE WHEN f.fate = 'send'
                               THEN now() + make_interval(secs => lease_seconds) END,
            claimed_at = CASE WHEN f.fate = 'send' THEN now() ELSE o.claimed_at END,
            discovered_by = CASE WHEN f.previous_status = 'sending'
                                 THEN 'expired_lease' ELSE discovery END,
            last_outcome = CASE f.fate WHEN 'send' THEN o.last_outcome
                                       WHEN 'exhausted' THEN 'lease_expired' ELSE f.fate END,
            last_error = CASE WHEN f.fate = 'exhausted'
                              THEN 'the last allowed attempt ended without a result (its worker stopped)'
                              ELSE o.last_error END,
            completed_at = CASE WHEN f.fate = 'send' THEN NULL ELSE now() END,
            updated_at = now()
        FROM fated f
        WHERE o.id = f.id
        RETURNING o.id, o.status, o.lease_token, o.attempts, o.max_attempts, o.message_id,
                  o.verification_id, o.discovered_by::text, o.traceparent, o.tracestate,
                  f.fate, f.previous_status, f.previous_owner, f.previous_token,
                  f.previous_attempts, f.previous_discovery, f.user_id, f.email, f.purpose,
                  f.token_key_id, f.token_nonce, f.expires_at, o.claimed_at,
                  f.previous_claimed_at, f.locale, f.issued_at
    ), vanished AS (
        -- A lease that ran out means its worker died mid-attempt: that attempt ended here.
        INSERT INTO notifier.delivery_attempts
            (outbox_id, attempt, lease_owner, lease_token, discovered_by, outcome, detail,
             claimed_at)
        SELECT c.id, c.previous_attempts, c.previous_owner, c.previous_token,
               c.previous_discovery, 'lease_expired',
               'the lease ran out before its worker completed the attempt', c.previous_claimed_at
        FROM claimed c
        WHERE c.previous_status = 'sending'
    )
    SELECT c.id, c.status, c.lease_token, c.attempts, c.max_attempts, c.message_id,
           c.verification_id, c.discovered_by, c.traceparent, c.tracestate, c.fate,
           c.previous_status, c.user_id, c.email, c.purpose, c.token_key_id, c.token_nonce,
           c.expires_at, c.claimed_at, c.locale, c.issued_at
    FROM claimed c
    ORDER BY c.id;
END;
$$;

-- Settles a batch of attempts: each row changes only while its lease is still held
-- (invariant 3), and every attempt is recorded, held or not. Parameters, one element per
-- attempt unless named otherwise: outbox ids, lease tokens, outcomes, retry delays
-- (seconds), SMTP codes, details (redacted), provider message ids, durations (ms), body
-- sent, attempt numbers, discovered_by; the lease owner and the unknown-outcome limit (one
-- each); claim times, whether to suppress the recipient's mailbox; the suppression lifetime
-- (seconds, one).
CREATE FUNCTION notifier.complete_v1(
    ids bigint[], tokens uuid[], outcomes text[], retry_delays double precision[],
    smtp_codes integer[], details text[], provider_message_ids text[],
    durations_ms double precision[], bodies_sent boolean[], attempt_numbers integer[],
    discoveries text[], owner text, unknown_limit integer, claim_times timestamptz[],
    suppress_mailbox boolean[], suppression_seconds double precision
) RETURNS TABLE (id bigint, status text, next_attempt_at timestamptz, lease_held boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT *
        FROM unnest(ids, tokens, outcomes, retry_delays, smtp_codes, details,
                    provider_message_ids, durations_ms, bodies_sent, attempt_numbers,
                    discoveries, claim_times, suppress_mailbox)
             AS i(id, token, outcome, retry_delay, smtp_code, detail, provider_message_id,
                  duration_ms, body_sent, attempt, discovered_by, claimed_at, suppress)
    ), held AS MATERIALIZED (
        -- Rows under the caller's lease token. The status is tested on this CTE's output
        -- (in decided), not here: a status test here would let the plan read the partial
        -- index of every sending row instead of looking each row up by id. A token is set
        -- only together with the status 'sending' (email_outbox_lease_iff_sending), so the
        -- rows locked here are those, and one reclaimed by another worker is absent.
        SELECT o.id, o.status, o.attempts, o.max_attempts, o.unknown_outcomes, v.expires_at
        FROM input i
        JOIN notifier.email_outbox o ON o.id = i.id AND o.lease_token = i.token
        JOIN notifier.verifications v ON v.id = o.verification_id
        FOR UPDATE OF o
    ), decided AS (
        -- The next status: mirrors notifier.outcomes.settle, case for case (and
        -- tests/integration/test_outcomes_sql.py runs both over every case).
        SELECT i.*, h.attempts, h.unknown_outcomes,
               CASE
                   WHEN i.outcome IN ('sent', 'verified') THEN 'sent'
                   WHEN i.outcome = 'permanent' THEN 'failed'
                   WHEN i.outcome IN ('expired', 'superseded') THEN 'expired'
                   -- Each retry after an unknown outcome may be a duplicate: stop after a few.
                   WHEN i.outcome = 'unknown' AND h.unknown_outcomes + 1 >= unknown_limit
                       THEN 'failed'
                   WHEN h.attempts >= h.max_attempts THEN 'failed'
                   -- A retry that would land after the link expires would send a dead link.
                   WHEN now() + make_interval(secs => i.retry_delay) >= h.expires_at
                       THEN 'expired'
                   ELSE 'pending'
               END AS new_status
        FROM input i JOIN held h ON h.id = i.id
        WHERE h.status = 'sending'
    ), updated AS (
        UPDATE notifier.email_outbox o SET
            status = d.new_status,
            lease_owner = NULL,
            lease_token = NULL,
            lease_until = NULL,
            next_attempt_at = CASE WHEN d.new_status = 'pending'
                                   THEN now() + make_interval(secs => d.retry_delay)
                                   ELSE o.next_attempt_at END,
            unknown_outcomes = o.unknown_outcomes
                               + CASE WHEN d.outcome = 'unknown' THEN 1 ELSE 0 END,
            provider_message_id = coalesce(d.provider_message_id, o.provider_message_id),
            last_outcome = d.outcome,
            last_error = CASE
                WHEN d.new_status = 'sent' THEN NULL
                WHEN d.new_status = 'failed' AND d.outcome = 'unknown'
                     AND d.unknown_outcomes + 1 >= unknown_limit
                    THEN 'flagged: the outcome was unknown ' || (d.unknown_outcomes + 1)
                         || ' times, so it is not sent again (each retry may be a duplicate); last: '
                         || coalesce(d.detail, 'no reply')
                WHEN d.new_status = 'failed' AND d.outcome <> 'permanent'
                    THEN 'gave up after ' || d.attempts || ' attempts; last: '
                         || coalesce(d.detail, d.outcome)
                WHEN d.new_status = 'expired' AND d.outcome IN ('transient', 'unknown')
                    THEN 'the link would expire before the next attempt; last: '
                         || coalesce(d.detail, d.outcome)
                ELSE d.detail
            END,
            completed_at = CASE WHEN d.new_status = 'pending' THEN NULL ELSE now() END,
            updated_at = now()
        FROM decided d
        WHERE o.id = d.id
        RETURNING o.id, o.status, o.next_attempt_at
    ), suppressed AS (
        -- Only a refusal the recipient's own mailbox caused (the worker decides which: see
        -- mailer.refusal_of) suppresses it, keyed by canonical mailbox, for a while.
        INSERT INTO notifier.suppressed_addresses AS s
            (email, reason, smtp_code, outbox_id, expires_at)
        SELECT coalesce(v.mailbox, lower(v.email)), coalesce(d.detail, 'permanent failure'),
               d.smtp_code, d.id,
               now() + make_interval(secs => suppression_seconds)
        FROM decided d
        JOIN notifier.email_outbox o ON o.id = d.id
        JOIN notifier.verifications v ON v.id = o.verification_id
        WHERE d.outcome = 'permanent' AND d.suppress
        ON CONFLICT (email) DO UPDATE SET
            reason = excluded.reason, smtp_code = excluded.smtp_code,
            outbox_id = excluded.outbox_id, suppressed_at = now(),
            expires_at = excluded.expires_at
    ), recorded AS (
        INSERT INTO notifier.delivery_attempts
            (outbox_id, attempt, lease_owner, lease_token, discovered_by, outcome, smtp_code,
             detail, provider_message_id, body_sent, lease_held, duration_ms, claimed_at)
        SELECT i.id, i.attempt, owner, i.token, i.discovered_by,
               CASE WHEN u.id IS NULL AND i.outcome NOT IN ('sent', 'unknown')
                    THEN 'lease_lost' ELSE i.outcome END,
               i.smtp_code, i.detail, i.provider_message_id, i.body_sent, u.id IS NOT NULL,
               i.duration_ms, i.claimed_at
        FROM input i LEFT JOIN updated u ON u.id = i.id
    )
    SELECT i.id, u.status, u.next_attempt_at, u.id IS NOT NULL
    FROM input i LEFT JOIN updated u ON u.id = i.id;
END;
$$;

-- The runtime role claims and completes through these now.
SELECT notifier.regrant_runtime_v1();
