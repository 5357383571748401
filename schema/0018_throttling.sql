-- Why: providers throttle. SES answers "454 4.7.0 Throttling failure: Maximum sending rate
-- exceeded" past an account's rate (others 421, 451 or 452 with words of rate); treated as
-- an ordinary transient failure, each one burned an attempt and waited the retry schedule's
-- minute, so a burst of signups turned into minute-long waits and, at the last attempt, a
-- failed verification. A throttled try is now an outcome of its own: it hands its attempt
-- back, never suppresses, and is retried after a short wait the worker chooses, until the
-- link would expire.

-- Every outcome before this release is still one: only new values need checking.
ALTER DOMAIN notifier.delivery_outcome DROP CONSTRAINT delivery_outcome_check;
ALTER DOMAIN notifier.delivery_outcome ADD CONSTRAINT delivery_outcome_check CHECK (VALUE IN (
    'sent', 'transient', 'permanent', 'unknown', 'throttled',
    'expired', 'superseded', 'verified',
    'lease_lost', 'lease_expired', 'released'
)) NOT VALID;

-- complete_v2 as schema 0016 wrote it, and a throttled try: pending again after its delay
-- (expired when the link would lapse first), its attempt handed back.
CREATE OR REPLACE FUNCTION notifier.complete_v2(
    ids bigint[], tokens uuid[], outcomes text[], retry_delays double precision[],
    smtp_codes integer[], details text[], provider_message_ids text[],
    durations_ms double precision[], bodies_sent boolean[], attempt_numbers integer[],
    discoveries text[], owner text, unknown_limit integer, claim_times timestamptz[],
    suppression_keys text[], suppression_seconds double precision
) RETURNS TABLE (id bigint, status text, next_attempt_at timestamptz, lease_held boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT *
        FROM unnest(ids, tokens, outcomes, retry_delays, smtp_codes, details,
                    provider_message_ids, durations_ms, bodies_sent, attempt_numbers,
                    discoveries, claim_times, suppression_keys)
             AS i(id, token, outcome, retry_delay, smtp_code, detail, provider_message_id,
                  duration_ms, body_sent, attempt, discovered_by, claimed_at, suppress_key)
    ), held AS MATERIALIZED (
        -- Rows under the caller's lease token (see complete_v1 for why the status is
        -- tested in decided, not here).
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
                   WHEN i.outcome = 'throttled'
                        AND now() + make_interval(secs => i.retry_delay) >= h.expires_at
                       THEN 'expired'
                   WHEN i.outcome = 'throttled' THEN 'pending'
                   WHEN i.outcome = 'unknown' AND h.unknown_outcomes + 1 >= unknown_limit
                       THEN 'failed'
                   WHEN h.attempts >= h.max_attempts THEN 'failed'
                   WHEN now() + make_interval(secs => i.retry_delay) >= h.expires_at
                       THEN 'expired'
                   ELSE 'pending'
               END AS new_status
        FROM input i JOIN held h ON h.id = i.id
        WHERE h.status = 'sending'
    ), updated AS (
        UPDATE notifier.email_outbox o SET
            status = d.new_status,
            -- A throttled try hands its attempt back: the provider asked us to slow down,
            -- the message was never judged.
            attempts = o.attempts - CASE WHEN d.outcome = 'throttled' THEN 1 ELSE 0 END,
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
                WHEN d.new_status = 'expired' AND d.outcome IN ('transient', 'unknown', 'throttled')
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
        -- delivery.smtp_replies.refusal_of) suppresses, and only the address refused.
        INSERT INTO notifier.suppressed_addresses AS s
            (email, reason, smtp_code, outbox_id, expires_at)
        -- One row per address: two refusals of it in one batch would otherwise fail the
        -- whole statement ("cannot affect row a second time"). The later attempt's words.
        SELECT DISTINCT ON (d.suppress_key)
               d.suppress_key, coalesce(d.detail, 'permanent failure'), d.smtp_code, d.id,
               now() + make_interval(secs => suppression_seconds)
        FROM decided d
        WHERE d.outcome = 'permanent' AND d.suppress_key IS NOT NULL
        ORDER BY d.suppress_key, d.id DESC
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
