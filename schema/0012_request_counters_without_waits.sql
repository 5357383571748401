-- Why: two costs of request_v1 under sustained load.
-- 1. Every request of one domain (and every request: the global budget) incremented one of
--    four counter rows per slice, picked at random, and held its row lock until COMMIT, so
--    concurrent requests queued behind each other's commits. request_v2 counts on any
--    counter row of the slice no other transaction holds (SKIP LOCKED), or on one of its
--    own (numbered by its backend) when all are held; the Python side no longer picks shards.
-- 2. Supersession joined the superseded verifications to the outbox; a plan made while the
--    table had no statistics read every pending row through the partial index of pending
--    rows, so each request cost in proportion to the backlog. It now settles each superseded
--    row by its unique key, and, like claim_v3, the function keeps one plan per session with
--    sequential scans ruled out (every statement in it reaches rows by key).
-- Everything else is request_v1's, unchanged. request_v1 stays for processes still calling
-- it during an upgrade.

CREATE FUNCTION notifier.request_v2(
    p_id uuid, p_user_id text, p_email text, p_mailbox text, p_purpose text, p_locale text,
    p_token_key_id text, p_token_nonce bytea, p_token_hash bytea, p_ttl double precision,
    p_message_id text, p_max_attempts integer, p_traceparent text, p_tracestate text,
    p_idempotency_key text, p_fingerprint bytea, p_known_fingerprints bytea[],
    p_idempotency_ttl double precision, p_client_id text,
    p_resend_limit integer, p_window double precision,
    p_budget_scopes text[], p_budget_subjects bytea[], p_budget_limits integer[],
    p_slice double precision
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
    -- Serialise requests that could race on one client's key, one user's limit or one
    -- mailbox's limit, until the transaction ends; always in this order, so none deadlock.
    IF p_idempotency_key IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(
            'notifier.idempotency:' || coalesce(p_client_id, '') || ':' || p_idempotency_key, 0));
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('notifier.user:' || p_user_id, 0));
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

    IF EXISTS (SELECT 1 FROM notifier.suppressed_addresses s
               WHERE s.email = p_mailbox AND (s.expires_at IS NULL OR s.expires_at > now())) THEN
        RETURN QUERY SELECT 'suppressed', NULL::uuid, NULL::text, NULL::timestamptz,
                            NULL::bigint, NULL::integer, NULL::text;
        RETURN;
    END IF;

    -- The user's and the mailbox's own limit: exact, from their requests in the window (at
    -- most the limit of them each, by index). The one that lasts longest is named.
    WITH recent AS (
        SELECT v.created_at, v.user_id = p_user_id AS same_user, v.mailbox = p_mailbox AS same_mailbox
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

    -- Counted against each shared budget, in the slice of the window it falls in, on any
    -- counter row of that slice no other transaction holds (SKIP LOCKED), or a new one when
    -- all are held: concurrent requests never wait on each other's counters, and a slice
    -- has about as many rows as requests ever ran at once. Budgets are taken in one order.
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
            -- Every row this request can see is held (or none exists yet): a row of its own,
            -- numbered by its backend, which no request running at the same time shares
            -- (another's uncommitted row is invisible here, so no free number can be read).
            INSERT INTO notifier.request_counts AS c (scope, subject, slice, shard, count)
            VALUES (p_budget_scopes[i], p_budget_subjects[i], now_slice,
                    pg_backend_pid() % 32767, 1)
            ON CONFLICT (scope, subject, slice, shard) DO UPDATE SET count = c.count + 1;
        END IF;
    END LOOP;

    -- Earlier unverified verifications for the same recipient stop working; their unsent
    -- deliveries are settled now rather than sent.
    FOR earlier IN
        UPDATE notifier.verifications v
        SET superseded_at = now()
        WHERE v.user_id = p_user_id AND v.email = p_email AND v.purpose = p_purpose
          AND v.id <> p_id AND v.verified_at IS NULL AND v.superseded_at IS NULL
        RETURNING v.id
    LOOP
        -- One row by its unique key: as a join, a plan made before the table had statistics
        -- read every pending row through the partial index instead.
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

-- The runtime role requests through request_v2 now.
SELECT notifier.regrant_runtime_v1();
