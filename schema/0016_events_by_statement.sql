-- Why: events were written by a row trigger per change, each calling emit_v1, which cost
-- four to nine times a set-based insert: a batch of 50 completions ran 50 trigger calls,
-- 100 nested function calls and 50 fan-out queries. And every question those triggers asked
-- inside the functions that turn sequential scans off (request, claim, complete) was
-- planned at a disabled scan's cost when no index answered it, past jit_above_cost, so
-- PostgreSQL JIT-compiled it on every call (370 ms for "is any endpoint enabled?").
-- This:
-- 1. writes the same events, with the same payloads, from statement triggers over their
--    transition tables: one INSERT per statement however many rows it changed; an INSERT
--    INTO notifier.events is the one way an event is written, and a statement trigger on
--    events fans it out to the subscribed endpoints and names its events on
--    notifier_events, one notification per statement (up to 200 ids each), not per event;
-- 2. indexes the enabled endpoints, and turns JIT off in every function that turns
--    sequential scans off (none of their statements gains from it);
-- 3. fixes complete_v2 (schema 0014): two permanent refusals of one address in one batch
--    failed the whole completion ("ON CONFLICT DO UPDATE command cannot affect row a second
--    time"), leaving every row of the batch to be sent again when its lease ran out.

DROP TRIGGER verification_created ON notifier.verifications;
DROP TRIGGER verification_confirmed ON notifier.verifications;
DROP TRIGGER verification_superseded ON notifier.verifications;
DROP TRIGGER verification_expired ON notifier.verifications;
DROP TRIGGER delivery_sent ON notifier.email_outbox;
DROP TRIGGER delivery_failed ON notifier.email_outbox;
DROP TRIGGER address_suppressed ON notifier.suppressed_addresses;
DROP TRIGGER address_suppressed_again ON notifier.suppressed_addresses;
DROP FUNCTION notifier.verification_changed_v1();
DROP FUNCTION notifier.delivery_ended_v1();
DROP FUNCTION notifier.address_suppressed_v1();
DROP FUNCTION notifier.verification_event_data_v1(notifier.verifications, text);
DROP FUNCTION notifier.emit_v1(text, uuid, jsonb);

-- Every event asks which endpoints are enabled, inside functions that turn sequential scans
-- off: without an index that answers, that question plans at a disabled scan's cost.
CREATE INDEX webhook_endpoints_enabled_idx ON notifier.webhook_endpoints (id)
    WHERE disabled_at IS NULL;

-- What a verification's events say: thin, never a token or an address. A scalar SQL
-- function, so the planner inlines it into the statements below.
CREATE FUNCTION notifier.verification_data_v1(
    p_id uuid, p_user_id text, p_purpose text, p_client_id text, p_status text
) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('verification_id', p_id, 'user_id', p_user_id,
                              'purpose', p_purpose, 'client_id', p_client_id,
                              'status', p_status)
$$;

-- An event is written one way: INSERT INTO notifier.events. Whatever statement inserts
-- them, this writes their deliveries to the endpoints subscribed to their types (none while
-- an endpoint is disabled: the feed still has them) and names them on notifier_events; the
-- workers hear of new deliveries on notifier_webhooks_v1, once per transaction.
-- Every trigger here fires once per statement over its transition tables, not once per
-- row: a batch of 50 completions writes its 50 events in one INSERT.
CREATE FUNCTION notifier.events_published_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM notifier.webhook_endpoints e WHERE e.disabled_at IS NULL) THEN
        INSERT INTO notifier.webhook_deliveries (event_id, endpoint_id)
        SELECT n.id, e.id
        FROM new_events n
        JOIN notifier.webhook_endpoints e
          ON e.disabled_at IS NULL AND (e.event_types IS NULL OR n.type = ANY (e.event_types));
        IF FOUND THEN
            PERFORM pg_notify('notifier_webhooks_v1', '');
        END IF;
    END IF;
    -- One notification per statement, not per event: the ids of its events in order,
    -- space-separated, 200 to a notification (7,399 bytes, under NOTIFY's 8,000).
    IF current_setting('notifier.event_notify', true) IS DISTINCT FROM 'off' THEN
        PERFORM pg_notify('notifier_events', string_agg(c.event_id, ' ' ORDER BY c.id))
        FROM (SELECT n.id, 'evt_' || replace(n.uid::text, '-', '') AS event_id,
                     (row_number() OVER (ORDER BY n.id) - 1) / 200 AS part
              FROM new_events n) c
        GROUP BY c.part
        ORDER BY c.part;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER events_published AFTER INSERT ON notifier.events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION notifier.events_published_v1();

-- verification.created, for every verification inserted.
CREATE FUNCTION notifier.verifications_created_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notifier.events (type, verification_id, data)
    SELECT 'verification.created', n.id,
           notifier.verification_data_v1(n.id, n.user_id, n.purpose, n.client_id, 'pending')
    FROM new_rows n;
    RETURN NULL;
END;
$$;

CREATE TRIGGER verifications_created AFTER INSERT ON notifier.verifications
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION notifier.verifications_created_v1();

-- A verification's own changes, one line each: the event, the status it names, when it
-- happened (the column's first setting), and what it adds to the thin payload.
CREATE FUNCTION notifier.verifications_changed_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notifier.events (type, verification_id, data)
    SELECT c.type, n.id,
           notifier.verification_data_v1(n.id, n.user_id, n.purpose, n.client_id, c.status)
           || c.extra
    FROM new_rows n
    JOIN old_rows o ON o.id = n.id
    CROSS JOIN LATERAL (VALUES
        ('verification.confirmed', 'verified',
         o.verified_at IS NULL AND n.verified_at IS NOT NULL, '{}'::jsonb),
        ('verification.superseded', 'superseded',
         o.superseded_at IS NULL AND n.superseded_at IS NOT NULL,
         jsonb_build_object('superseded_by', n.superseded_by)),
        ('verification.expired', 'expired',
         o.lapsed_at IS NULL AND n.lapsed_at IS NOT NULL, '{}'::jsonb)
    ) AS c(type, status, happened, extra)
    WHERE c.happened;
    RETURN NULL;
END;
$$;

CREATE TRIGGER verifications_changed AFTER UPDATE ON notifier.verifications
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION notifier.verifications_changed_v1();

-- A delivery's end: sent (the mail server accepted it; not a row settled as sent because
-- its verification was already confirmed), with its reply's id, or failed, with the
-- reason's class (notifier.event_types.FailureReason).
CREATE FUNCTION notifier.deliveries_ended_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notifier.events (type, verification_id, data)
    SELECT CASE n.status WHEN 'sent' THEN 'verification.sent' ELSE 'verification.failed' END,
           n.verification_id,
           notifier.verification_data_v1(v.id, v.user_id, v.purpose, v.client_id, n.status)
           || CASE n.status
                  WHEN 'sent' THEN
                      jsonb_build_object('provider_message_id', n.provider_message_id)
                  ELSE jsonb_build_object('reason', CASE n.last_outcome
                      WHEN 'permanent' THEN 'rejected'
                      WHEN 'unknown' THEN 'outcome_unknown'
                      ELSE 'attempts_exhausted' END)
              END
    FROM new_rows n
    JOIN old_rows o ON o.id = n.id
    JOIN notifier.verifications v ON v.id = n.verification_id
    WHERE (n.status = 'sent' AND o.status <> 'sent' AND n.last_outcome = 'sent')
       OR (n.status = 'failed' AND o.status <> 'failed');
    RETURN NULL;
END;
$$;

CREATE TRIGGER deliveries_ended AFTER UPDATE ON notifier.email_outbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION notifier.deliveries_ended_v1();

-- An address suppressed, or suppressed again (an upsert fires both triggers, each over
-- its own rows): the address only redacted.
CREATE FUNCTION notifier.addresses_suppressed_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- The INSERT trigger has no old rows; every row it sees is news.
    IF TG_OP = 'INSERT' THEN
        INSERT INTO notifier.events (type, verification_id, data)
        SELECT 'email.suppressed', o.verification_id, jsonb_build_object(
                   'email', notifier.redacted_email_v1(n.email),
                   'verification_id', o.verification_id,
                   'smtp_code', n.smtp_code, 'expires_at', n.expires_at)
        FROM new_rows n
        LEFT JOIN notifier.email_outbox o ON o.id = n.outbox_id;
    ELSE
        INSERT INTO notifier.events (type, verification_id, data)
        SELECT 'email.suppressed', o.verification_id, jsonb_build_object(
                   'email', notifier.redacted_email_v1(n.email),
                   'verification_id', o.verification_id,
                   'smtp_code', n.smtp_code, 'expires_at', n.expires_at)
        FROM new_rows n
        JOIN old_rows p ON p.email = n.email
        LEFT JOIN notifier.email_outbox o ON o.id = n.outbox_id
        WHERE p.suppressed_at IS DISTINCT FROM n.suppressed_at;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER addresses_suppressed AFTER INSERT ON notifier.suppressed_addresses
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION notifier.addresses_suppressed_v1();
CREATE TRIGGER addresses_suppressed_again AFTER UPDATE ON notifier.suppressed_addresses
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION notifier.addresses_suppressed_v1();

-- complete_v2 as schema 0014 wrote it, but for one suppression per address per batch.
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

-- JIT off wherever sequential scans are off (complete_v2 above says so itself): the event
-- triggers run inside these functions, and any scan left without an index would be costed
-- at a disabled scan's 10^10 and compiled on every call.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'notifier'::regnamespace
          AND 'enable_seqscan=off' = ANY (p.proconfig)
          AND NOT 'jit=off' = ANY (p.proconfig)
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET jit = off', f);
    END LOOP;
END;
$$;

-- The runtime role may run the new functions.
SELECT notifier.regrant_runtime_v1();
