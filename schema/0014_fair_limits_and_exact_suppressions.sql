-- Why: an attack on the previous release found limits and suppressions that let one party
-- act on another's users, and a confirm that could answer wrongly under a double tap.
-- 1. A suppression was stored for the canonical mailbox, so a refusal of `alice+x@` (a tag
--    the server does not know) suppressed `alice@` for everyone. A suppression is now for
--    the address that was refused, case folded (notifier.addresses.Address.folded, computed
--    in Python and passed in), while limits keep counting the canonical mailbox.
-- 2. Two clients requesting the same user id superseded each other's links and shared one
--    per-user limit. Supersession and the per-user limit are now per client; the mailbox
--    limit still counts every client (it protects the person who owns the mailbox).
-- 3. A resent verification did not say what replaced it: superseded_by names it. An old
--    link renews only while nothing newer was asked for its user (confirm_v1).
-- 4. Two confirms of one link at once: the one that waited on the other's row lock found
--    nothing to update, then read the row from its statement's old snapshot and answered
--    "not valid". confirm_v1 reads the row again in a statement of its own (a new snapshot)
--    and answers "already verified".
-- 5. Signing out of the console ended every session of the key (every colleague signed in
--    with it); it now ends the one session, recorded until that session would have expired.
-- Canonical mailboxes now follow the large providers' rules (Gmail ignores dots,
-- googlemail.com is gmail.com); rows still inside the longest window a limit can have are
-- rewritten below so the limits count them with the new ones.
-- request_v2 and complete_v1 stay for processes of the previous release during a rollout.

ALTER TABLE notifier.verifications ADD COLUMN superseded_by uuid;

UPDATE notifier.verifications
SET mailbox = replace(split_part(mailbox, '@', 1), '.', '') || '@gmail.com'
WHERE split_part(mailbox, '@', 2) IN ('gmail.com', 'googlemail.com')
  AND scrubbed_at IS NULL
  AND created_at > now() - interval '30 days';

-- Suppressions stored before this release are keyed by the canonical mailbox. Those that
-- name the delivery they came from are keyed again by the address it was sent to, so the
-- refusal of `alice+x@` stops refusing `alice@` (ASCII addresses only: an internationalised
-- domain's key needs IDNA, which SQL lacks; such rows keep their key until they expire).
DELETE FROM notifier.suppressed_addresses s
USING notifier.email_outbox o, notifier.verifications v
WHERE s.outbox_id = o.id AND v.id = o.verification_id AND v.scrubbed_at IS NULL
  AND v.email ~ '^[ -~]+$' AND s.email <> lower(v.email)
  AND EXISTS (SELECT 1 FROM notifier.suppressed_addresses t WHERE t.email = lower(v.email));
UPDATE notifier.suppressed_addresses s SET email = lower(v.email)
FROM notifier.email_outbox o
JOIN notifier.verifications v ON v.id = o.verification_id
WHERE s.outbox_id = o.id AND v.scrubbed_at IS NULL
  AND v.email ~ '^[ -~]+$' AND s.email <> lower(v.email);

-- Cleanup scrubs the reason of a suppression with the delivery that caused it.
CREATE INDEX suppressed_addresses_outbox_idx
    ON notifier.suppressed_addresses (outbox_id) WHERE outbox_id IS NOT NULL;

-- One row per signed-out console session (a session is its key and the millisecond it was
-- issued), kept until the session would have expired anyway.
CREATE TABLE notifier.session_sign_outs (
    key_id      text        NOT NULL REFERENCES notifier.api_keys (id) ON DELETE CASCADE,
    issued_ms   bigint      NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (key_id, issued_ms)
);
CREATE INDEX session_sign_outs_expires_idx ON notifier.session_sign_outs (expires_at);

CREATE FUNCTION notifier.request_v3(
    p_id uuid, p_user_id text, p_email text, p_mailbox text, p_suppression_key text,
    p_purpose text, p_locale text,
    p_token_key_id text, p_token_nonce bytea, p_token_hash bytea, p_ttl double precision,
    p_message_id text, p_max_attempts integer, p_traceparent text, p_tracestate text,
    p_idempotency_key text, p_fingerprint bytea, p_known_fingerprints bytea[],
    p_idempotency_ttl double precision, p_client_id text,
    p_resend_limit integer, p_window double precision,
    p_budget_scopes text[], p_budget_subjects bytea[], p_budget_limits integer[],
    p_slice double precision, p_replaces uuid
) RETURNS TABLE (
    result text, id uuid, status text, expires_at timestamptz, outbox_id bigint,
    retry_after integer, limit_scope text
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    found_id uuid;
    found_fingerprint bytea;
    found_expires timestamptz;
    found_status text;
    refused_scope text;
    refused_wait integer;
    new_expires timestamptz;
    new_outbox bigint;
    now_slice timestamptz;
    earlier uuid;
BEGIN
    -- Serialise requests that could race on one client's key, one client's user or one
    -- mailbox's limit, until the transaction ends; always in this order, so none deadlock.
    IF p_idempotency_key IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(
            'notifier.idempotency:' || coalesce(p_client_id, '') || ':' || p_idempotency_key, 0));
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(
        'notifier.user:' || coalesce(p_client_id, '') || ':' || p_user_id, 0));
    PERFORM pg_advisory_xact_lock(hashtextextended('notifier.mailbox:' || p_mailbox, 0));

    IF p_idempotency_key IS NOT NULL THEN
        -- An expired key may be used again by the same client.
        UPDATE notifier.verifications v
        SET idempotency_key = NULL, request_fingerprint = NULL
        WHERE coalesce(v.client_id, '') = coalesce(p_client_id, '')
          AND v.idempotency_key = p_idempotency_key
          AND v.created_at <= now() - make_interval(secs => p_idempotency_ttl);
        SELECT v.id, v.request_fingerprint, v.expires_at, o.status
        INTO found_id, found_fingerprint, found_expires, found_status
        FROM notifier.verifications v
        JOIN notifier.email_outbox o ON o.verification_id = v.id
        WHERE coalesce(v.client_id, '') = coalesce(p_client_id, '')
          AND v.idempotency_key = p_idempotency_key;
        IF found_id IS NOT NULL THEN
            -- The same body (under any secret still configured) replays; another conflicts.
            RETURN QUERY SELECT
                CASE WHEN found_fingerprint = ANY(p_known_fingerprints)
                     THEN 'replayed' ELSE 'conflict' END,
                found_id, found_status, found_expires, NULL::bigint, NULL::integer, NULL::text;
            RETURN;
        END IF;
    END IF;

    -- The address itself, as it was refused (not every spelling of its mailbox).
    IF EXISTS (SELECT 1 FROM notifier.suppressed_addresses s
               WHERE s.email = p_suppression_key
                 AND (s.expires_at IS NULL OR s.expires_at > now())) THEN
        RETURN QUERY SELECT 'suppressed', NULL::uuid, NULL::text, NULL::timestamptz,
                            NULL::bigint, NULL::integer, NULL::text;
        RETURN;
    END IF;

    -- The user's limit (this client's user) and the mailbox's (every client's requests):
    -- exact, from their requests in the window. The one that lasts longest is named.
    WITH recent AS (
        SELECT v.created_at,
               v.user_id = p_user_id
                   AND coalesce(v.client_id, '') = coalesce(p_client_id, '') AS same_user,
               v.mailbox = p_mailbox AS same_mailbox
        FROM notifier.verifications v
        WHERE (v.user_id = p_user_id OR v.mailbox = p_mailbox)
          AND v.created_at > now() - make_interval(secs => p_window)
    ), per_key AS (
        SELECT 1 AS n, 'user' AS scope,
               (array_agg(r.created_at ORDER BY r.created_at DESC))[p_resend_limit] AS blocking
        FROM recent r WHERE r.same_user HAVING count(*) >= p_resend_limit
        UNION ALL
        SELECT 2, 'mailbox',
               (array_agg(r.created_at ORDER BY r.created_at DESC))[p_resend_limit]
        FROM recent r WHERE r.same_mailbox HAVING count(*) >= p_resend_limit
    )
    SELECT k.scope,
           ceil(extract(epoch FROM k.blocking + make_interval(secs => p_window) - now()))::integer
    INTO refused_scope, refused_wait
    FROM per_key k ORDER BY k.blocking DESC, k.n LIMIT 1;

    -- The shared budgets (domain, client, everything): their counters' slices in the window.
    IF refused_scope IS NULL AND cardinality(p_budget_scopes) > 0 THEN
        WITH wanted AS (
            SELECT w.scope, w.subject, w.max_count, w.n
            FROM unnest(p_budget_scopes, p_budget_subjects, p_budget_limits) WITH ORDINALITY
                 AS w(scope, subject, max_count, n)
        ), slices AS (
            SELECT w.n, w.scope, w.max_count, c.slice, sum(c.count) AS count
            FROM wanted w
            JOIN notifier.request_counts c
              ON c.scope = w.scope AND c.subject = w.subject
             AND c.slice > now() - make_interval(secs => p_window)
            GROUP BY w.n, w.scope, w.max_count, c.slice
        ), newest_first AS (
            SELECT s.n, s.scope, s.max_count, s.slice,
                   sum(s.count) OVER (PARTITION BY s.n ORDER BY s.slice DESC) AS through_here
            FROM slices s
        )
        SELECT f.scope,
               ceil(extract(epoch FROM max(f.slice) + make_interval(secs => p_window) - now()))::integer
        INTO refused_scope, refused_wait
        FROM newest_first f
        WHERE f.through_here >= f.max_count
        GROUP BY f.n, f.scope
        ORDER BY f.n
        LIMIT 1;
    END IF;
    IF refused_scope IS NOT NULL THEN
        RETURN QUERY SELECT 'throttled', NULL::uuid, NULL::text, NULL::timestamptz,
                            NULL::bigint, greatest(refused_wait, 1), refused_scope;
        RETURN;
    END IF;

    -- The verification and its outbox row; the outbox insert fires the NOTIFY trigger.
    INSERT INTO notifier.verifications AS v
        (id, user_id, email, purpose, token_key_id, token_nonce, token_hash, expires_at,
         idempotency_key, request_fingerprint, client_id, mailbox, locale)
    VALUES (p_id, p_user_id, p_email, p_purpose, p_token_key_id, p_token_nonce, p_token_hash,
            now() + make_interval(secs => p_ttl), p_idempotency_key,
            CASE WHEN p_idempotency_key IS NOT NULL THEN p_fingerprint END, p_client_id,
            p_mailbox, p_locale)
    RETURNING v.expires_at INTO new_expires;
    INSERT INTO notifier.email_outbox AS o
        (verification_id, message_id, max_attempts, traceparent, tracestate)
    VALUES (p_id, p_message_id, p_max_attempts, p_traceparent, p_tracestate)
    RETURNING o.id INTO new_outbox;

    -- Counted against each shared budget as request_v2 counts (schema 0012).
    now_slice := to_timestamp(floor(extract(epoch FROM now()) / p_slice) * p_slice);
    FOR i IN 1 .. coalesce(cardinality(p_budget_scopes), 0) LOOP
        UPDATE notifier.request_counts c SET count = c.count + 1
        WHERE (c.scope, c.subject, c.slice, c.shard) = (
            SELECT f.scope, f.subject, f.slice, f.shard
            FROM notifier.request_counts f
            WHERE f.scope = p_budget_scopes[i] AND f.subject = p_budget_subjects[i]
              AND f.slice = now_slice
            ORDER BY f.shard
            LIMIT 1
            FOR UPDATE SKIP LOCKED);
        IF NOT FOUND THEN
            INSERT INTO notifier.request_counts AS c (scope, subject, slice, shard, count)
            VALUES (p_budget_scopes[i], p_budget_subjects[i], now_slice,
                    pg_backend_pid() % 32767, 1)
            ON CONFLICT (scope, subject, slice, shard) DO UPDATE SET count = c.count + 1;
        END IF;
    END LOOP;

    -- This client's earlier unverified verifications for the same recipient stop working,
    -- naming this one as what replaced them; their unsent deliveries are settled now.
    -- Another client's verification of the same user id is that client's own business,
    -- unless this request names it as the one it replaces (p_replaces: a console resend,
    -- made by a support key for the app's user).
    FOR earlier IN
        UPDATE notifier.verifications v
        SET superseded_at = now(), superseded_by = p_id
        WHERE v.user_id = p_user_id AND v.email = p_email AND v.purpose = p_purpose
          AND (coalesce(v.client_id, '') = coalesce(p_client_id, '') OR v.id = p_replaces)
          AND v.id <> p_id AND v.verified_at IS NULL AND v.superseded_at IS NULL
        RETURNING v.id
    LOOP
        UPDATE notifier.email_outbox o
        SET status = 'expired', last_outcome = 'superseded', completed_at = now(),
            updated_at = now(),
            last_error = 'a newer verification replaced this one before it was sent'
        WHERE o.verification_id = earlier AND o.status = 'pending';
    END LOOP;

    RETURN QUERY SELECT 'accepted', p_id, 'pending', new_expires, new_outbox,
                        NULL::integer, NULL::text;
END;
$$;

-- Confirms a link's token if it is live, then reads the verification in a statement of
-- its own: a confirm that waited on a concurrent one's row lock sees that one's commit and
-- answers "already verified", not the state its first snapshot held. No row: no such token.
-- What the verification's chain and its client say is there too, for a fresh-link request.
CREATE FUNCTION notifier.confirm_v1(p_token_hash bytea, p_apply boolean)
RETURNS TABLE (
    id uuid, token_hash bytea, user_id text, email text, purpose text, client_id text,
    scrubbed_at timestamptz, locale text, verified_at timestamptz, superseded_at timestamptz,
    superseded_by uuid, successor_key text, expires_at timestamptz, expired boolean,
    confirmed_now boolean, user_verified boolean, client_valid boolean, newest_for_user boolean
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    confirmed uuid;
BEGIN
    IF p_apply THEN
        UPDATE notifier.verifications v
        SET verified_at = now()
        WHERE v.token_hash = p_token_hash AND v.verified_at IS NULL
          AND v.superseded_at IS NULL AND v.expires_at > now()
        RETURNING v.id INTO confirmed;
    END IF;
    RETURN QUERY
    SELECT v.id, v.token_hash, v.user_id, v.email, v.purpose, v.client_id, v.scrubbed_at,
           v.locale, v.verified_at, v.superseded_at, v.superseded_by,
           (SELECT s.idempotency_key FROM notifier.verifications s WHERE s.id = v.superseded_by),
           v.expires_at, v.expires_at <= now(), confirmed IS NOT NULL,
           EXISTS (SELECT 1 FROM notifier.verifications w
                   WHERE w.user_id = v.user_id AND w.purpose = v.purpose
                     AND coalesce(w.client_id, '') = coalesce(v.client_id, '')
                     AND w.verified_at IS NOT NULL),
           v.client_id IS NULL OR EXISTS (SELECT 1 FROM notifier.api_keys k
                                          WHERE k.id = v.client_id AND k.revoked_at IS NULL),
           -- Whether a later request for this client's user and purpose exists, to any
           -- address: a user who moved on to another address renews no old one.
           NOT EXISTS (SELECT 1 FROM notifier.verifications w
                       WHERE w.user_id = v.user_id AND w.purpose = v.purpose
                         AND coalesce(w.client_id, '') = coalesce(v.client_id, '')
                         AND w.created_at > v.created_at)
    FROM notifier.verifications v
    WHERE v.token_hash = p_token_hash;
END;
$$;

-- complete_v1 (schema 0013) with the suppression named by the caller: the key of the
-- address that was refused (NULL: suppress nothing), instead of a flag that suppressed the
-- verification's canonical mailbox. Everything else is complete_v1's, case for case.
CREATE FUNCTION notifier.complete_v2(
    ids bigint[], tokens uuid[], outcomes text[], retry_delays double precision[],
    smtp_codes integer[], details text[], provider_message_ids text[],
    durations_ms double precision[], bodies_sent boolean[], attempt_numbers integer[],
    discoveries text[], owner text, unknown_limit integer, claim_times timestamptz[],
    suppression_keys text[], suppression_seconds double precision
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
        SELECT d.suppress_key, coalesce(d.detail, 'permanent failure'), d.smtp_code, d.id,
               now() + make_interval(secs => suppression_seconds)
        FROM decided d
        WHERE d.outcome = 'permanent' AND d.suppress_key IS NOT NULL
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

-- The runtime role records and reads sign-outs, and is granted every function by the
-- schema (as in 0009), now with the sign-out table.
CREATE OR REPLACE FUNCTION notifier.grant_runtime_v1(runtime_role name) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    current_oid oid := (SELECT oid FROM pg_roles WHERE rolname = runtime_role);
BEGIN
    IF current_oid IS NULL THEN
        DELETE FROM notifier.runtime_roles WHERE role = runtime_role;
        RETURN;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA notifier TO %I', runtime_role);
    EXECUTE format('GRANT SELECT ON notifier.schema_migrations TO %I', runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.verifications TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON notifier.email_outbox TO %I', runtime_role);
    -- UPDATE: cleanup scrubs the reply texts of attempts it keeps.
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON notifier.delivery_attempts TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.suppressed_addresses TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.request_counts TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.session_sign_outs TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, UPDATE (last_used_at, sessions_valid_after) '
                   'ON notifier.api_keys TO %I', runtime_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA notifier TO %I', runtime_role);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION notifier.grant_runtime_v1(name), '
                   'notifier.regrant_runtime_v1() FROM %I', runtime_role);
    INSERT INTO notifier.runtime_roles (role, role_oid) VALUES (runtime_role, current_oid)
    ON CONFLICT (role) DO UPDATE SET role_oid = excluded.role_oid, granted_at = now();
END;
$$;
REVOKE EXECUTE ON FUNCTION notifier.grant_runtime_v1(name) FROM PUBLIC;
SELECT notifier.regrant_runtime_v1();
