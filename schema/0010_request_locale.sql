-- Why: the verification email is written in the language the request asks for, and states
-- the link's lifetime as configured rather than as whatever is left when the worker gets to
-- it. So a verification keeps the request's locale, and a claim hands the worker both the
-- locale and when the verification was issued (created_at: the same clock as expires_at, so
-- expires_at - issued_at is the configured lifetime exactly).
--
-- The locale is a language tag as the request validated and normalised it ("de", "pt-BR");
-- NULL means no preference (English). The CHECK is added NOT VALID: every existing row is
-- NULL, so there is nothing to validate, and skipping the scan keeps the ACCESS EXCLUSIVE
-- lock of this ALTER short on a large table. New and updated rows are checked all the same.
--
-- claim_v2 is claim_v1 (0003) returning two more columns. claim_v1 stays, unchanged, for
-- workers of the previous release still running during a rollout.

ALTER TABLE notifier.verifications ADD COLUMN locale text;
ALTER TABLE notifier.verifications ADD CONSTRAINT verifications_locale_check
    CHECK (locale ~ '^[a-z]{2,3}(-[A-Za-z0-9]{1,8})*$' AND length(locale) <= 35) NOT VALID;

CREATE FUNCTION notifier.claim_v2(
    candidate_ids bigint[], owner text, lease_seconds double precision, discovery text
) RETURNS TABLE (
    id bigint, status text, lease_token uuid, attempts integer, max_attempts integer,
    message_id text, verification_id uuid, discovered_by text, traceparent text,
    tracestate text, fate text, previous_status text, user_id text, email text,
    purpose text, token_key_id text, token_nonce bytea, expires_at timestamptz,
    claimed_at timestamptz, locale text, issued_at timestamptz
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
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
        WHERE o.id = ANY(candidate_ids)
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

-- The runtime role claims through claim_v2 now.
SELECT notifier.regrant_runtime_v1();
