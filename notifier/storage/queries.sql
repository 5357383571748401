-- The query catalogue: every runtime statement notifier issues, looked up by name.
-- Each entry starts with "-- name: <name>" and a line saying what its parameters are.

-- name: migration_lock
-- $1: advisory lock key. Session-level, held across all migrations of one run.
SELECT pg_advisory_lock($1);

-- name: migration_unlock
-- $1: advisory lock key.
SELECT pg_advisory_unlock($1);

-- name: migration_ledger_exists
-- No parameters. The ledger is created by the first migration.
SELECT to_regclass('notifier.schema_migrations') IS NOT NULL;

-- name: migrations_applied
-- No parameters.
SELECT version, name, checksum, applied_at FROM notifier.schema_migrations ORDER BY version;

-- name: migration_record
-- $1: version, $2: name, $3: checksum.
INSERT INTO notifier.schema_migrations (version, name, checksum) VALUES ($1, $2, $3);

-- name: request_verification
-- request_v5's parameters by name (schema/0017_verification_codes.sql), each
-- cast to its type, so every driver sends the same statement whatever it infers from a
-- value (an empty list, a uuid given as text). A whole verification request in one
-- statement: idempotency, suppression, the limits, the verification and its outbox row (the
-- NOTIFY trigger), the budgets, supersession, and the events of them. One row: result
-- (accepted, replayed, conflict, suppressed, throttled), and what goes with it.
SELECT result, id::text AS id, status, expires_at, outbox_id, retry_after, limit_scope
FROM notifier.request_v5(
    p_id => $1::uuid, p_user_id => $2::text, p_email => $3::text, p_mailbox => $4::text,
    p_suppression_key => $5::text, p_purpose => $6::text, p_locale => $7::text,
    p_token_key_id => $8::text, p_token_nonce => $9::bytea, p_token_hash => $10::bytea,
    p_ttl => $11::float8, p_message_id => $12::text, p_max_attempts => $13::int,
    p_traceparent => $14::text, p_tracestate => $15::text, p_idempotency_key => $16::text,
    p_fingerprint => $17::bytea, p_known_fingerprints => $18::bytea[],
    p_idempotency_ttl => $19::float8, p_client_id => $20::text, p_resend_limit => $21::int,
    p_window => $22::float8, p_budget_scopes => $23::text[], p_budget_subjects => $24::bytea[],
    p_budget_limits => $25::int[], p_slice => $26::float8, p_replaces => $27::uuid,
    p_return_to => $28::text, p_method => $29::text, p_code_hash => $30::bytea,
    p_code_subject => $31::bytea, p_code_digits => $32::int, p_code_ttl => $33::float8);

-- name: confirm_code
-- confirm_code_v1's parameters by name (schema/0017_verification_codes.sql), each cast to
-- its type, so every driver sends the same statement: the verification, the calling API
-- key (NULL: the application's own code), the configured key ids and the submitted code's
-- keyed hash under each, and the limits. Judges the code and counts it in one statement:
-- one row, its result (not_found, no_code, already_verified, expired, locked, verified,
-- wrong) and what goes with it.
SELECT result, attempts_remaining, superseded_by::text AS superseded_by, locked_by, retry_after
FROM notifier.confirm_code_v1(
    p_id => $1::uuid, p_client_id => $2::text, p_key_ids => $3::text[],
    p_code_hashes => $4::bytea[], p_max_failures => $5::int, p_mailbox_failures => $6::int,
    p_window => $7::float8, p_slice => $8::float8);

-- name: confirm_token
-- $1: token hash, $2: apply (true: confirm a live link; false: only say what it would do,
-- as GET must never confirm). The verification's state afterwards, read in a statement of
-- its own (confirm_v2, schema 0015: with the return_to its resends keep); no row: no such
-- token.
SELECT * FROM notifier.confirm_v2(p_token_hash => $1, p_apply => $2);

-- name: verification_status
-- $1: verification id. Delivery status and verification state, for GET /v1/verifications/{id},
-- with the newest verification of its resend chain (itself when nothing replaced it).
WITH RECURSIVE chain AS (
    SELECT v.id, v.superseded_by, 0 AS depth FROM notifier.verifications v WHERE v.id = $1
    UNION ALL
    SELECT later.id, later.superseded_by, c.depth + 1
    FROM chain c JOIN notifier.verifications later ON later.id = c.superseded_by
), latest AS (
    SELECT c.id FROM chain c ORDER BY c.depth DESC LIMIT 1
)
SELECT v.id, v.user_id, v.email, v.purpose, v.created_at, v.expires_at, v.verified_at,
       v.superseded_at, v.superseded_by,
       o.status, o.attempts, o.max_attempts, o.next_attempt_at, o.last_outcome, o.last_error,
       o.completed_at, o.message_id,
       v.method, v.code_failures, v.code_locked_at, v.code_expires_at,
       l.id AS latest_id, lo.status AS latest_status, l.verified_at AS latest_verified_at,
       l.expires_at AS latest_expires_at
FROM notifier.verifications v
JOIN notifier.email_outbox o ON o.verification_id = v.id
JOIN latest ON true
JOIN notifier.verifications l ON l.id = latest.id
JOIN notifier.email_outbox lo ON lo.verification_id = l.id
WHERE v.id = $1;

-- name: verification_attempts
-- $1: verification id. The attempt timeline, oldest first.
SELECT a.attempt, a.lease_owner, a.discovered_by, a.outcome, a.smtp_code, a.detail,
       a.provider_message_id, a.body_sent, a.lease_held, a.duration_ms, a.claimed_at,
       a.finished_at
FROM notifier.delivery_attempts a
JOIN notifier.email_outbox o ON o.id = a.outbox_id
WHERE o.verification_id = $1
ORDER BY a.id;

-- name: suppressions
-- No parameters. Every address suppressed now, newest first.
SELECT email, reason, smtp_code, suppressed_at, expires_at FROM notifier.suppressed_addresses
WHERE expires_at IS NULL OR expires_at > now()
ORDER BY suppressed_at DESC;

-- name: clear_suppression
-- $1: an address, folded (notifier.addresses.folded). Returns it if it was suppressed (expired or not).
DELETE FROM notifier.suppressed_addresses WHERE email = $1 RETURNING email;

-- name: api_key_insert
-- $1: key id, $2: name, $3: scopes, $4: SHA-256 of the key, $5: its return URL prefixes
-- (NULL: NOTIFIER_RETURN_URLS as it is). No row back: the id is taken.
INSERT INTO notifier.api_keys (id, name, scopes, secret_hash, return_urls)
VALUES ($1, $2, $3::notifier.api_scope[], $4, $5::text[])
ON CONFLICT (id) DO NOTHING
RETURNING id, name, scopes::text[] AS scopes, created_at;

-- name: api_key_by_id
-- $1: key id. What authenticating a request needs; no row: no such key. signed_out: the
-- sessions of this key signed out one by one (by when they were issued, epoch ms).
SELECT id, name, scopes::text[] AS scopes, secret_hash, revoked_at IS NOT NULL AS revoked,
       return_urls,
       extract(epoch FROM sessions_valid_after)::float8 AS sessions_valid_after,
       ARRAY(SELECT s.issued_ms FROM notifier.session_sign_outs s
             WHERE s.key_id = k.id AND s.expires_at > now()) AS signed_out
FROM notifier.api_keys k
WHERE id = $1;

-- name: session_sign_out
-- $1: key id, $2: when the session was issued (epoch ms), $3: when it would expire (epoch
-- seconds). That one session is void; the key's other sessions are not.
INSERT INTO notifier.session_sign_outs (key_id, issued_ms, expires_at)
VALUES ($1, $2, to_timestamp($3))
ON CONFLICT (key_id, issued_ms) DO NOTHING;

-- name: forget_session_sign_outs
-- $1: batch size. Deletes sign-outs of sessions that have expired by themselves since.
WITH batch AS (
    SELECT key_id, issued_ms FROM notifier.session_sign_outs
    WHERE expires_at < now()
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM notifier.session_sign_outs s USING batch b
    WHERE (s.key_id, s.issued_ms) = (b.key_id, b.issued_ms)
    RETURNING 1
)
SELECT count(*) FROM deleted;

-- name: api_keys
-- No parameters. Every key, newest first; never the hash.
SELECT id, name, scopes::text[] AS scopes, return_urls, created_at, last_used_at, revoked_at
FROM notifier.api_keys
ORDER BY created_at DESC, id;

-- name: api_key_return_urls
-- $1: key id, $2: its return URL prefixes (NULL: NOTIFIER_RETURN_URLS as it is). Returns
-- whether the key exists.
UPDATE notifier.api_keys SET return_urls = $2::text[] WHERE id = $1 RETURNING id;

-- name: api_key_revoke
-- $1: key id. Returns whether the key existed; revoking twice keeps the first time.
UPDATE notifier.api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = $1
RETURNING id, revoked_at;

-- name: api_keys_used
-- $1: key ids, $2: when each was last seen (timestamptz[]). Batched by the API, so a busy
-- client costs one write every few seconds, not one per request.
UPDATE notifier.api_keys k
SET last_used_at = greatest(k.last_used_at, u.seen)
FROM unnest($1::text[], $2::timestamptz[]) AS u(id, seen)
WHERE k.id = u.id;

-- name: role_exists
-- $1: role name.
SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1);

-- name: grant_runtime
-- $1: an existing role. Gives it what api, worker, stats and cleanup need, nothing more.
SELECT notifier.grant_runtime_v1($1);

-- name: ready
-- No parameters. The database answers.
SELECT 1;

-- name: jit_off_in_transaction
-- No parameters. For the rest of this transaction only: asyncpg's type catalogue query is
-- planned expensive enough that JIT compiles it (a second and more).
SET LOCAL jit = off;

-- name: learn_array_types
-- No parameters. A column of each array type notifier's statements pass or return, so a new
-- pool connection learns their codecs in one catalogue query.
SELECT NULL::bigint[] AS bigints, NULL::uuid[] AS uuids, NULL::boolean[] AS booleans,
       NULL::float8[] AS floats, NULL::integer[] AS integers,
       NULL::timestamptz[] AS timestamps, NULL::text[] AS texts, NULL::bytea[] AS bytes;

-- name: claim_by_ids
-- $1: outbox ids (bigint[]), $2: lease owner, $3: lease (seconds), $4: discovered_by.
-- Claims exactly the named rows that are claimable now and not locked by another claim
-- (claim_v4 locks them, SKIP LOCKED, and claims them; schema/0017).
SELECT * FROM notifier.claim_v4(
    candidate_ids => $1::bigint[], owner => $2, lease_seconds => $3, discovery => $4);

-- name: claim_due
-- $1: most rows to claim, $2: lease owner, $3: lease (seconds), $4: discovered_by for due
-- pending rows. The sweep: claims what no notification announced.
WITH expired AS MATERIALIZED (
    -- Leases that ran out first: those rows have waited longest. Served by the partial
    -- index on sending rows.
    SELECT id FROM notifier.email_outbox
    WHERE status = 'sending' AND lease_until < now()
    ORDER BY lease_until
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    -- Then due pending rows, oldest first, from the partial index on pending rows.
    SELECT id FROM notifier.email_outbox
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at
    LIMIT greatest($1 - (SELECT count(*) FROM expired), 0)
    FOR UPDATE SKIP LOCKED
)
SELECT * FROM notifier.claim_v4(
    candidate_ids => ARRAY(SELECT id FROM expired UNION ALL SELECT id FROM due),
    owner => $2, lease_seconds => $3, discovery => $4
);

-- name: take_send_tokens
-- $1: tokens wanted, $2: NOTIFIER_SEND_RATE (NULL: none), $3: how fast the rate in force
-- grows back (messages a second, every second), $4: NOTIFIER_DAILY_QUOTA (NULL: none). The
-- fleet's token bucket (schema 0019): granted, the rate in force, the seconds until a token
-- is worth asking for when fewer were granted, and the pause in force, if one is.
SELECT granted, rate, wait, paused_until
FROM notifier.take_send_tokens_v1($1::int, $2::float8, $3::float8, $4::int);

-- name: return_send_tokens
-- $1: tokens taken but not spent.
SELECT notifier.return_send_tokens_v1($1);

-- name: send_rate_throttled
-- $1: the lowest rate in force. The provider throttled: the rate in force halves (at most
-- once a second); NULL when another throttle halved it less than a second ago.
SELECT notifier.send_rate_throttled_v1($1);

-- name: send_paused
-- No parameters. The provider's daily quota is spent: every worker pauses until the UTC day
-- rolls over. When the pause ends.
SELECT notifier.send_paused_v1();

-- name: send_rate_in_force
-- No parameters. The fleet's send rate as the console shows it (no row: none was set yet).
SELECT rate, backed_off_at, day, sent_today, paused_until FROM notifier.send_rate;

-- name: report_target
-- $1: outbox id. The address a report about this delivery concerns (NULL: no such delivery).
SELECT v.email FROM notifier.email_outbox o
JOIN notifier.verifications v ON v.id = o.verification_id
WHERE o.id = $1;

-- name: outbox_by_message_id
-- $1: a Message-ID header as sent ("<verify.UUID@domain>"). Its delivery, if any.
SELECT id FROM notifier.email_outbox WHERE message_id = $1;

-- name: apply_report
-- $1: outbox id, $2: report id, $3: kind, $4: bounce type, $5: source, $6: enhanced status,
-- $7: diagnostic, $8: the address as suppressions key it, $9: suppress it (a permanent
-- bounce the recipient caused), $10: the suppression's lifetime (seconds). Keeps the report
-- once and acts on it (schema 0020); what it did.
SELECT notifier.apply_report_v1($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- name: reports_of_verification
-- $1: verification id. Its delivery's reports, oldest first (the console's timeline).
SELECT r.kind, r.bounce_type, r.source, r.status, r.diagnostic, r.applied, r.received_at
FROM notifier.delivery_reports r
JOIN notifier.email_outbox o ON o.id = r.outbox_id
WHERE o.verification_id = $1
ORDER BY r.id;

-- name: check_sendable
-- $1: outbox ids (bigint[]), $2: their lease tokens (uuid[]). The gate just before DATA:
-- is each lease still held (and unexpired), and is its verification still worth sending?
SELECT i.id,
       o.id IS NOT NULL AS lease_held,
       CASE
           WHEN v.verified_at IS NOT NULL THEN 'verified'
           WHEN v.superseded_at IS NOT NULL THEN 'superseded'
           WHEN v.expires_at <= now() THEN 'expired'
           ELSE 'live'
       END AS verification
FROM unnest($1::bigint[], $2::uuid[]) WITH ORDINALITY AS i(id, token, n)
LEFT JOIN notifier.email_outbox o
       ON o.id = i.id AND o.lease_token = i.token AND o.status = 'sending'
      AND o.lease_until > now()
LEFT JOIN notifier.verifications v ON v.id = o.verification_id
ORDER BY i.n;

-- name: renew_leases
-- $1: outbox ids, $2: lease tokens, $3: lease (seconds). Extends only leases still held;
-- the ids returned are the renewed ones, so a missing id is a lease lost.
UPDATE notifier.email_outbox o
SET lease_until = now() + make_interval(secs => $3), updated_at = now()
FROM unnest($1::bigint[], $2::uuid[]) AS i(id, token)
WHERE o.id = i.id AND o.lease_token = i.token AND o.status = 'sending'
RETURNING o.id;

-- name: complete_attempts
-- complete_v2's parameters by name (schema 0014), one array element per attempt but for the
-- lease owner, the unknown-outcome limit and the suppression lifetime (seconds).
-- Settles a batch of attempts in one statement: each row changes only while its lease is
-- still held (invariant 3), and every attempt is recorded, held or not. A suppression key
-- (the refused address, folded) suppresses that address; NULL suppresses nothing. One row
-- back per attempt: id, status, next_attempt_at, lease_held.
SELECT * FROM notifier.complete_v2(
    ids => $1::bigint[], tokens => $2::uuid[], outcomes => $3::text[],
    retry_delays => $4::float8[], smtp_codes => $5::int[], details => $6::text[],
    provider_message_ids => $7::text[], durations_ms => $8::float8[],
    bodies_sent => $9::bool[], attempt_numbers => $10::int[], discoveries => $11::text[],
    owner => $12, unknown_limit => $13, claim_times => $14::timestamptz[],
    suppression_keys => $15::text[], suppression_seconds => $16);

-- name: release_leases
-- $1: outbox ids, $2: lease tokens, $3: lease owner. Shutdown hands back rows whose
-- attempt sent nothing: pending again at once, the attempt not counted, and announced so a
-- live worker takes them without waiting for a sweep.
WITH released AS (
    UPDATE notifier.email_outbox o SET
        status = 'pending',
        attempts = o.attempts - 1,
        lease_owner = NULL,
        lease_token = NULL,
        lease_until = NULL,
        next_attempt_at = now(),
        last_outcome = 'released',
        updated_at = now()
    FROM unnest($1::bigint[], $2::uuid[]) AS i(id, token)
    WHERE o.id = i.id AND o.lease_token = i.token AND o.status = 'sending'
    RETURNING o.id, o.attempts + 1 AS attempt, i.token, o.discovered_by, o.claimed_at
), recorded AS (
    INSERT INTO notifier.delivery_attempts
        (outbox_id, attempt, lease_owner, lease_token, discovered_by, outcome, detail,
         claimed_at)
    SELECT id, attempt, $3, token, discovered_by, 'released',
           'the worker shut down before sending; the attempt is not counted', claimed_at
    FROM released
)
SELECT notifier.announce_v1(ARRAY(SELECT id FROM released)) AS notifications,
       (SELECT count(*) FROM released) AS released;

-- name: defer_leases
-- $1: outbox ids, $2: lease tokens, $3: delay (seconds). Rows whose recipient domain already
-- has as many sends in flight as one domain may hold go back uncounted, due after the delay.
-- No attempt is recorded and nothing is announced: nothing happened to them, and an
-- announcement would only bring them straight back to a domain that is still busy.
UPDATE notifier.email_outbox o SET
    status = 'pending',
    attempts = o.attempts - 1,
    lease_owner = NULL,
    lease_token = NULL,
    lease_until = NULL,
    next_attempt_at = now() + make_interval(secs => $3),
    updated_at = now()
FROM unnest($1::bigint[], $2::uuid[]) AS i(id, token)
WHERE o.id = i.id AND o.lease_token = i.token AND o.status = 'sending'
RETURNING o.id;

-- name: leases_held_by
-- $1: lease owner. The leases the database says one owner holds: a worker's last look
-- before it exits, for claims that committed but whose answer it never received.
SELECT id, lease_token FROM notifier.email_outbox
WHERE status = 'sending' AND lease_owner = $1;

-- name: notify
-- $1: channel, $2: payload. The listener's self-notification round trip.
SELECT pg_notify($1, $2);

-- name: server_address
-- No parameters. Which server a connection reached (host NULL over a Unix socket), for the
-- log: after a failover it names the new primary.
SELECT host(inet_server_addr()) AS host, inet_server_port() AS port, pg_backend_pid() AS pid;

-- name: queue_health
-- No parameters. The figures behind the queue gauges and `notifier stats`. Each count is
-- served by a partial index.
SELECT
    (SELECT count(*) FROM notifier.email_outbox WHERE status = 'pending') AS pending,
    (SELECT count(*) FROM notifier.email_outbox
      WHERE status = 'pending' AND next_attempt_at <= now()) AS pending_due,
    (SELECT count(*) FROM notifier.email_outbox WHERE status = 'sending') AS sending,
    (SELECT count(*) FROM notifier.email_outbox
      WHERE status = 'sending' AND lease_until < now()) AS expired_leases,
    (SELECT coalesce(extract(epoch FROM now() - min(next_attempt_at)), 0)::float8
       FROM notifier.email_outbox
      WHERE status = 'pending' AND next_attempt_at <= now()) AS oldest_pending_seconds,
    pg_notification_queue_usage() AS notification_queue_usage;

-- name: delivery_stats
-- $1: window (seconds). What happened recently: attempts by outcome and claims by how they
-- were discovered (from the attempt log), and deliveries finished by status.
SELECT 'outcome' AS kind, outcome AS name, count(*) AS count
FROM notifier.delivery_attempts
WHERE finished_at > now() - make_interval(secs => $1)
GROUP BY outcome
UNION ALL
SELECT 'discovered_by', coalesce(discovered_by, 'unknown'), count(*)
FROM notifier.delivery_attempts
WHERE finished_at > now() - make_interval(secs => $1) AND outcome <> 'released'
GROUP BY discovered_by
UNION ALL
SELECT 'finished', status, count(*)
FROM notifier.email_outbox
WHERE completed_at > now() - make_interval(secs => $1)
GROUP BY status
ORDER BY 1, 2;

-- name: console_series
-- $1: minutes. Deliveries finished per minute over the last $1 minutes (this one included),
-- sent and failed, oldest first, with every minute present. Served by the index on
-- completed_at: a page view reads the hour's finished rows, not the table.
WITH minutes AS (
    SELECT generate_series(date_trunc('minute', now()) - make_interval(mins => $1 - 1),
                           date_trunc('minute', now()), interval '1 minute') AS minute
), finished AS (
    SELECT date_trunc('minute', completed_at) AS minute,
           count(*) FILTER (WHERE status = 'sent') AS sent,
           count(*) FILTER (WHERE status = 'failed') AS failed
    FROM notifier.email_outbox
    WHERE completed_at >= date_trunc('minute', now()) - make_interval(mins => $1 - 1)
    GROUP BY 1
)
SELECT m.minute, coalesce(f.sent, 0)::integer AS sent, coalesce(f.failed, 0)::integer AS failed
FROM minutes m
LEFT JOIN finished f ON f.minute = m.minute
ORDER BY m.minute;

-- name: console_attempt_counts
-- $1: window (seconds). Attempts that finished in the window, by outcome and by how their
-- claim found the row (what `delivery_stats` counts), reached through their deliveries'
-- indexes rather than by reading every attempt kept for the retention period.
WITH recent_rows AS (
    -- The deliveries an attempt in the window can belong to: an attempt is recorded no
    -- later than the completion of its delivery, so its delivery either finished in the
    -- window or has not finished. (A stale worker's lease_lost report that arrives after
    -- its row finished before the window is the one attempt missed.) One arm per index.
    SELECT id FROM notifier.email_outbox
    WHERE completed_at > now() - make_interval(secs => $1)
    UNION ALL
    SELECT id FROM notifier.email_outbox WHERE status = 'pending'
    UNION ALL
    SELECT id FROM notifier.email_outbox WHERE status = 'sending'
), recent AS (
    SELECT a.outcome, a.discovered_by
    FROM recent_rows r
    JOIN notifier.delivery_attempts a ON a.outbox_id = r.id
    WHERE a.finished_at > now() - make_interval(secs => $1)
)
SELECT 'outcome' AS kind, outcome AS name, count(*)::integer AS count
FROM recent
GROUP BY outcome
UNION ALL
SELECT 'discovered_by', coalesce(discovered_by, 'unknown'), count(*)::integer
FROM recent
WHERE outcome <> 'released'
GROUP BY discovered_by
ORDER BY 1, 2;

-- name: console_deliveries_by_mailbox
-- $1: canonical mailbox, $2: most rows. A mailbox's deliveries, newest first (by the
-- mailbox index). Scrubbed rows hold a redacted mailbox and are not found.
SELECT v.id, v.email, v.purpose, v.created_at, v.verified_at, v.superseded_at,
       o.status, o.attempts, o.completed_at
FROM notifier.verifications v
JOIN notifier.email_outbox o ON o.verification_id = v.id
WHERE v.mailbox = $1
ORDER BY v.created_at DESC
LIMIT $2;

-- name: console_delivery
-- $1: verification id. Everything the console shows of one delivery, and what resending it
-- needs; never the token or its hash.
SELECT v.id, v.user_id, v.email, v.mailbox, v.purpose, v.locale, v.client_id, v.created_at,
       v.expires_at, v.verified_at, v.superseded_at, v.scrubbed_at, v.return_to,
       v.method, v.code_failures, v.code_locked_at, v.code_expires_at,
       o.status, o.attempts, o.max_attempts, o.unknown_outcomes, o.next_attempt_at,
       o.last_outcome, o.last_error, o.completed_at, o.message_id, o.traceparent
FROM notifier.verifications v
JOIN notifier.email_outbox o ON o.verification_id = v.id
WHERE v.id = $1;

-- name: console_resent
-- $1: idempotency key, $2: client id. The verification a console resend with this key by
-- this client already made (by the unique index on client and key), or no row.
SELECT id FROM notifier.verifications
WHERE coalesce(client_id, '') = coalesce($2, '') AND idempotency_key = $1;

-- name: console_superseded_by
-- $1: verification id. The newest later verification for the same user, address and
-- purpose (what superseded this one), or no row.
SELECT later.id
FROM notifier.verifications v
JOIN notifier.verifications later
  ON later.user_id = v.user_id AND later.email = v.email AND later.purpose = v.purpose
 AND later.created_at >= v.created_at AND later.id <> v.id
WHERE v.id = $1
ORDER BY later.created_at DESC
LIMIT 1;

-- name: console_suppression
-- $1: an address, folded (notifier.addresses.folded). Its suppression now in force, or no row.
SELECT email, reason, smtp_code, suppressed_at, expires_at
FROM notifier.suppressed_addresses
WHERE email = $1 AND (expires_at IS NULL OR expires_at > now());

-- name: console_suppressions
-- $1: most rows. Suppressions in force, newest first, each with how many there are in all.
SELECT email, reason, smtp_code, suppressed_at, expires_at, count(*) OVER () AS total
FROM notifier.suppressed_addresses
WHERE expires_at IS NULL OR expires_at > now()
ORDER BY suppressed_at DESC
LIMIT $1;

-- name: scrub_finished
-- $1: age (seconds), $2: batch size. Verifications whose delivery finished more than $1
-- seconds ago and whose link has expired lose everything derived from the person: the
-- address, mailbox and user id become their redacted form ("a***@example.com", "4***"),
-- the idempotency key and the request's fingerprint are cleared, and so are the mail
-- servers' words about them (attempt details, reports' diagnostics, the last error, the
-- provider's reply, and
-- the reason of a suppression one of them caused, which keeps its code). The suppression
-- itself stays until it expires: it is what keeps that address from being mailed. One
-- bounded batch per call; returns how many were scrubbed. Their events' user ids are
-- redacted with them.
WITH batch AS (
    SELECT v.id, o.id AS outbox_id
    FROM notifier.email_outbox o
    JOIN notifier.verifications v ON v.id = o.verification_id
    WHERE o.completed_at < now() - make_interval(secs => $1) AND v.scrubbed_at IS NULL
      AND v.expires_at <= now()
    ORDER BY o.completed_at
    LIMIT $2
    FOR UPDATE OF v SKIP LOCKED
), scrubbed AS (
    UPDATE notifier.verifications v
    SET email = left(split_part(v.email, '@', 1), 1) || '***@'
                || substr(v.email, strpos(v.email, '@') + 1),
        mailbox = left(split_part(v.mailbox, '@', 1), 1) || '***@'
                  || substr(v.mailbox, strpos(v.mailbox, '@') + 1),
        user_id = left(v.user_id, 1) || '***',
        idempotency_key = NULL,
        request_fingerprint = NULL,
        scrubbed_at = now()
    FROM batch b
    WHERE v.id = b.id
    RETURNING v.id
), outbox AS (
    UPDATE notifier.email_outbox o
    SET last_error = CASE WHEN o.last_error IS NULL THEN NULL ELSE '[scrubbed]' END,
        provider_message_id = NULL
    FROM batch b
    WHERE o.id = b.outbox_id
), attempts AS (
    UPDATE notifier.delivery_attempts a
    SET detail = CASE WHEN a.detail IS NULL THEN NULL ELSE '[scrubbed]' END,
        provider_message_id = NULL
    FROM batch b
    WHERE a.outbox_id = b.outbox_id AND (a.detail IS NOT NULL OR a.provider_message_id IS NOT NULL)
), reports AS (
    UPDATE notifier.delivery_reports r
    SET diagnostic = '[scrubbed]'
    FROM batch b
    WHERE r.outbox_id = b.outbox_id AND r.diagnostic IS NOT NULL
), reasons AS (
    UPDATE notifier.suppressed_addresses s
    SET reason = 'the recipient''s server refused the address for good ([scrubbed])'
    FROM batch b
    WHERE s.outbox_id = b.outbox_id
), said AS (
    -- Its events name its user too.
    UPDATE notifier.events e
    SET data = e.data || jsonb_build_object('user_id', left(e.data ->> 'user_id', 1) || '***')
    FROM batch b
    WHERE e.verification_id = b.id AND e.data ? 'user_id'
)
SELECT count(*) FROM scrubbed;

-- name: delete_finished
-- $1: age (seconds), $2: batch size. Deletes verifications whose delivery finished more than
-- $1 seconds ago (their outbox rows and attempts go with them), one bounded batch per call.
WITH batch AS (
    SELECT o.verification_id
    FROM notifier.email_outbox o
    WHERE o.completed_at < now() - make_interval(secs => $1)
    ORDER BY o.completed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM notifier.verifications v
    USING batch b
    WHERE v.id = b.verification_id
    RETURNING v.id
)
SELECT count(*) FROM deleted;

-- name: expire_suppressions
-- $1: batch size. Deletes suppressions that expired, one bounded batch per call.
WITH batch AS (
    SELECT email FROM notifier.suppressed_addresses
    WHERE expires_at < now()
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM notifier.suppressed_addresses s USING batch b WHERE s.email = b.email
    RETURNING s.email
)
SELECT count(*) FROM deleted;

-- name: forget_request_counts
-- $1: window (seconds), $2: batch size. Deletes request budget slices that left the window
-- (the codes' failures have a window of their own: forget_code_failures).
WITH batch AS (
    SELECT scope, subject, slice, shard FROM notifier.request_counts
    WHERE slice < now() - make_interval(secs => $1) AND scope <> 'code_failures'
    ORDER BY slice
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM notifier.request_counts c USING batch b
    WHERE (c.scope, c.subject, c.slice, c.shard) = (b.scope, b.subject, b.slice, b.shard)
    RETURNING 1
)
SELECT count(*) FROM deleted;

-- name: forget_code_failures
-- $1: the failure window (seconds), $2: batch size. Deletes slices of mailboxes' wrong
-- codes that left it.
WITH batch AS (
    SELECT scope, subject, slice, shard FROM notifier.request_counts
    WHERE slice < now() - make_interval(secs => $1) AND scope = 'code_failures'
    ORDER BY slice
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM notifier.request_counts c USING batch b
    WHERE (c.scope, c.subject, c.slice, c.shard) = (b.scope, b.subject, b.slice, b.shard)
    RETURNING 1
)
SELECT count(*) FROM deleted;

-- name: try_maintenance_lock
-- $1: advisory lock key. One maintenance batch at a time across every worker; held until
-- the batch's transaction ends, so no session state is left behind (poolers).
SELECT pg_try_advisory_xact_lock($1);

-- name: forget_events
-- $1: age (seconds), $2: batch size. Deletes events older than $1 seconds whose webhook
-- deliveries have all ended (their deliveries and attempts go with them), one bounded
-- batch per call: an event still owed to an endpoint stays until it is delivered or dead.
WITH batch AS (
    SELECT e.id FROM notifier.events e
    WHERE e.occurred_at < now() - make_interval(secs => $1)
      AND NOT EXISTS (SELECT 1 FROM notifier.webhook_deliveries d
                      WHERE d.event_id = e.id AND d.status IN ('pending', 'sending'))
    ORDER BY e.occurred_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM notifier.events e USING batch b WHERE e.id = b.id RETURNING 1
)
SELECT count(*) FROM deleted;

-- name: mark_lapsed
-- $1: batch size. Links that expired unconfirmed and unreplaced are marked lapsed, which
-- writes their verification.expired event (schema 0015), one bounded batch per call; returns
-- how many.
WITH batch AS (
    SELECT v.id FROM notifier.verifications v
    WHERE v.expires_at <= now() AND v.verified_at IS NULL AND v.superseded_at IS NULL
      AND v.lapsed_at IS NULL
    ORDER BY v.expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), lapsed AS (
    UPDATE notifier.verifications v SET lapsed_at = now()
    FROM batch b WHERE v.id = b.id
    RETURNING 1
)
SELECT count(*) FROM lapsed;

-- name: events_after
-- $1: the cursor's transaction, $2: the cursor's event id, $3: most events. The feed: events
-- after the cursor in commit order (by writing transaction, then id), only from transactions
-- older than every one still open, so no event can later appear before what was read: no
-- gaps and no repeats for a reader resuming from its cursor.
SELECT e.id, e.uid, e.tx::text AS tx, e.type, e.verification_id, e.occurred_at, e.data
FROM notifier.events e
WHERE (e.tx, e.id) > ($1::xid8, $2::bigint)
  AND e.tx < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY e.tx, e.id
LIMIT $3;

-- name: events_end
-- No parameters. The newest committed event's place in commit order (no row: none yet), for
-- a reader that wants the events from now on, not the history.
SELECT e.tx::text AS tx, e.id
FROM notifier.events e
ORDER BY e.tx DESC, e.id DESC
LIMIT 1;

-- name: events_of_verification
-- $1: verification id. Its events, oldest first (the console's page of it).
SELECT e.id, e.uid, e.type, e.verification_id, e.occurred_at, e.data
FROM notifier.events e
WHERE e.verification_id = $1
ORDER BY e.id;

-- name: webhook_endpoint_insert
-- $1: url, $2: event types (NULL: every type), $3: description, $4: secret key id,
-- $5: secret nonce. The endpoint, as listed.
INSERT INTO notifier.webhook_endpoints (url, event_types, description, secret_key_id,
                                        secret_nonce)
VALUES ($1, $2::text[], $3, $4, $5)
RETURNING id, url, event_types, description, created_at, failing_since, last_success_at,
          last_failure_at, disabled_at, disabled_reason, secret_key_id, previous_key_id,
          previous_until, 0::bigint AS pending, 0::bigint AS dead;

-- name: webhook_endpoints
-- No parameters. Every endpoint, oldest first, with its deliveries waiting and dead.
SELECT e.id, e.url, e.event_types, e.description, e.created_at, e.failing_since,
       e.last_success_at, e.last_failure_at, e.disabled_at, e.disabled_reason,
       e.secret_key_id, e.previous_key_id, e.previous_until,
       (SELECT count(*) FROM notifier.webhook_deliveries d
        WHERE d.endpoint_id = e.id AND d.status IN ('pending', 'sending')) AS pending,
       (SELECT count(*) FROM notifier.webhook_deliveries d
        WHERE d.endpoint_id = e.id AND d.status = 'dead') AS dead
FROM notifier.webhook_endpoints e
ORDER BY e.created_at, e.id;

-- name: webhook_endpoint_secrets
-- $1: endpoint id. What its secrets are derived from; no row: no such endpoint.
SELECT id, secret_key_id, secret_nonce FROM notifier.webhook_endpoints WHERE id = $1;

-- name: webhook_endpoint_delete
-- $1: endpoint id. Its deliveries and their attempts go with it. No row: no such endpoint.
DELETE FROM notifier.webhook_endpoints WHERE id = $1 RETURNING id;

-- name: webhook_endpoint_rotate
-- $1: endpoint id, $2: new secret key id, $3: new nonce, $4: seconds the old secret still
-- signs. The old secret becomes the previous one (an older previous is dropped). No row:
-- no such endpoint.
UPDATE notifier.webhook_endpoints SET
    previous_key_id = secret_key_id, previous_nonce = secret_nonce,
    previous_until = now() + make_interval(secs => $4),
    secret_key_id = $2, secret_nonce = $3
WHERE id = $1
RETURNING id, previous_until;

-- name: webhook_endpoint_enable
-- $1: endpoint id. Enabled again with a clean record; its deliveries still waiting go out.
-- No row: no such endpoint.
WITH enabled AS (
    UPDATE notifier.webhook_endpoints SET
        disabled_at = NULL, disabled_reason = NULL, failing_since = NULL
    WHERE id = $1
    RETURNING id
)
SELECT e.id, pg_notify('notifier_webhooks_v1', '') FROM enabled e;

-- name: webhook_delivery_replay
-- $1: delivery id. A dead delivery (or one to an endpoint since enabled) goes out again with
-- a fresh schedule, at once. No row: no such dead delivery.
WITH replayed AS (
    UPDATE notifier.webhook_deliveries SET
        status = 'pending', attempts = 0, next_attempt_at = now(), completed_at = NULL,
        updated_at = now()
    WHERE id = $1 AND status = 'dead'
    RETURNING id
)
SELECT r.id, pg_notify('notifier_webhooks_v1', '') FROM replayed r;

-- name: webhook_claim
-- claim_webhooks_v1 (schema 0015): up to $3 due deliveries under leases of $2 seconds for
-- owner $1, at most $4 in flight to one endpoint across every worker.
SELECT * FROM notifier.claim_webhooks_v1(
    p_owner => $1, p_lease_seconds => $2, p_limit => $3, p_per_endpoint => $4);

-- name: webhook_complete
-- complete_webhooks_v1 (schema 0015): one row per attempt, in parallel arrays.
SELECT * FROM notifier.complete_webhooks_v1(
    p_ids => $1::bigint[], p_tokens => $2::uuid[], p_outcomes => $3::text[],
    p_status_codes => $4::int[], p_details => $5::text[], p_durations_ms => $6::float8[],
    p_retry_delays => $7::float8[], p_owner => $8, p_disable_after => $9);

-- name: webhook_release
-- $1: ids, $2: lease tokens. Deliveries claimed but never sent (shutdown) go back at once,
-- their attempt uncounted.
UPDATE notifier.webhook_deliveries d SET
    status = 'pending', attempts = d.attempts - 1, lease_owner = NULL, lease_token = NULL,
    lease_until = NULL, next_attempt_at = now(), updated_at = now()
FROM unnest($1::bigint[], $2::uuid[]) AS r(id, token)
WHERE d.id = r.id AND d.lease_token = r.token AND d.status = 'sending';

-- name: webhook_next_due
-- No parameters. Seconds until the next delivery to an enabled endpoint comes due (a retry,
-- or a lease that runs out), by the database clock; NULL: nothing waits.
SELECT extract(epoch FROM min(t.at) - now())::float8
FROM notifier.webhook_endpoints e,
     LATERAL (SELECT min(d.next_attempt_at) AS at FROM notifier.webhook_deliveries d
              WHERE d.endpoint_id = e.id AND d.status = 'pending'
              UNION ALL
              SELECT min(d.lease_until) FROM notifier.webhook_deliveries d
              WHERE d.endpoint_id = e.id AND d.status = 'sending') t
WHERE e.disabled_at IS NULL;

-- name: webhook_deliveries_of_endpoint
-- $1: endpoint id, $2: most rows. Its deliveries, newest first, with their event.
SELECT d.id, d.status, d.attempts, d.unknown_outcomes, d.next_attempt_at, d.last_status_code,
       d.last_error, d.created_at, d.completed_at, ev.uid AS event_uid, ev.type AS event_type,
       ev.verification_id
FROM notifier.webhook_deliveries d
JOIN notifier.events ev ON ev.id = d.event_id
WHERE d.endpoint_id = $1
ORDER BY d.id DESC
LIMIT $2;

-- name: webhook_deliveries_of_verification
-- $1: verification id. The webhook deliveries of its events, oldest first.
SELECT d.id, d.status, d.attempts, d.unknown_outcomes, d.next_attempt_at, d.last_status_code,
       d.last_error, d.created_at, d.completed_at, ev.uid AS event_uid, ev.type AS event_type,
       e.url, e.id AS endpoint_id
FROM notifier.events ev
JOIN notifier.webhook_deliveries d ON d.event_id = ev.id
JOIN notifier.webhook_endpoints e ON e.id = d.endpoint_id
WHERE ev.verification_id = $1
ORDER BY d.id;

-- name: webhook_attempts_of
-- $1: delivery ids. Their attempts, oldest first.
SELECT a.delivery_id, a.attempt, a.lease_owner, a.outcome, a.status_code, a.detail,
       a.duration_ms, a.lease_held, a.created_at
FROM notifier.webhook_attempts a
WHERE a.delivery_id = ANY($1::bigint[])
ORDER BY a.delivery_id, a.id;

-- name: webhook_delivery_endpoint
-- $1: delivery id. The endpoint it goes to; no row: no such delivery.
SELECT endpoint_id FROM notifier.webhook_deliveries WHERE id = $1;
