-- Why: a link is only half of how signup verification works; a code typed into the app
-- works where links fail (a native app, another device, a mail client that opens links in
-- another browser). A verification now has a method (link, code, or link_and_code). Its
-- code is derived like its link token (from the secret of token_key_id and token_nonce, in
-- a context of its own: notifier.tokens) and never stored: the database keeps only a keyed
-- hash of it, so a dump cannot be checked against the million six-digit guesses.
-- confirm_code_v1 judges a submitted code and counts the attempt in the same statement,
-- under the verification's row lock and its mailbox's lock, so concurrent guesses never
-- share a count; a mailbox's wrong codes over a longer window are counted apart from its
-- verifications (request_counts, scope code_failures, keyed by an HMAC of the mailbox), so
-- neither a resend, nor a new request, nor cleanup of a finished verification gives anyone
-- fresh guesses. A code-only verification has no link: its token hash is of nothing.

ALTER TABLE notifier.verifications
    ADD COLUMN method text NOT NULL DEFAULT 'link'
        CHECK (method IN ('link', 'code', 'link_and_code')),
    -- HMAC-SHA256 of the code under the secret of token_key_id (notifier.tokens.TokenKeys
    -- .code_hash); NULL for a link.
    ADD COLUMN code_hash bytea CHECK (length(code_hash) = 32),
    ADD COLUMN code_digits smallint CHECK (code_digits BETWEEN 6 AND 10),
    -- The code's own lifetime (NOTIFIER_CODE_TTL), never past the verification's.
    ADD COLUMN code_expires_at timestamptz,
    -- HMAC of the canonical mailbox under the server secret: what its wrong codes are
    -- counted by, whatever later scrubs or deletes the verification.
    ADD COLUMN code_subject bytea CHECK (length(code_subject) = 32),
    -- Wrong codes judged against this verification, and when they locked it.
    ADD COLUMN code_failures smallint NOT NULL DEFAULT 0 CHECK (code_failures >= 0),
    ADD COLUMN code_locked_at timestamptz;

-- A verification with a code has all of it. Rows before this release are links, so only
-- new rows need checking.
ALTER TABLE notifier.verifications ADD CONSTRAINT verifications_code_whole CHECK (
    method = 'link' OR (code_hash IS NOT NULL AND code_subject IS NOT NULL
                        AND code_digits IS NOT NULL AND code_expires_at IS NOT NULL)) NOT VALID;

-- A mailbox's wrong codes, in slices of the failure window like the request budgets.
ALTER TABLE notifier.request_counts DROP CONSTRAINT request_counts_scope_check;
ALTER TABLE notifier.request_counts ADD CONSTRAINT request_counts_scope_check
    CHECK (scope IN ('domain', 'client', 'global', 'code_failures'));

-- Who may confirm a code: the API key that requested the verification, or one that
-- requested an earlier verification the chain replaced (a console resend of the app's own):
-- found by walking superseded_by backwards.
CREATE INDEX verifications_superseded_by_idx ON notifier.verifications (superseded_by)
    WHERE superseded_by IS NOT NULL;

-- Whether two digests are equal, in time that does not depend on where they differ: the
-- XOR of the two is counted whole, never compared up to its first difference.
CREATE FUNCTION notifier.digests_equal_v1(a bytea, b bytea) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT length(a) = length(b) AND length(a) > 0
           AND bit_count(('x' || encode(a, 'hex'))::bit varying
                         # ('x' || encode(b, 'hex'))::bit varying) = 0
$$;

-- request_v4 (schema 0015), and for a code the verification's method, its code's keyed hash,
-- length and lifetime. A `code` verification lives as long as its code (p_ttl is the code's
-- lifetime then, the caller's choice). Everything else is request_v4's, case for case.
CREATE FUNCTION notifier.request_v5(
    p_id uuid, p_user_id text, p_email text, p_mailbox text, p_suppression_key text,
    p_purpose text, p_locale text,
    p_token_key_id text, p_token_nonce bytea, p_token_hash bytea, p_ttl double precision,
    p_message_id text, p_max_attempts integer, p_traceparent text, p_tracestate text,
    p_idempotency_key text, p_fingerprint bytea, p_known_fingerprints bytea[],
    p_idempotency_ttl double precision, p_client_id text,
    p_resend_limit integer, p_window double precision,
    p_budget_scopes text[], p_budget_subjects bytea[], p_budget_limits integer[],
    p_slice double precision, p_replaces uuid, p_return_to text,
    p_method text, p_code_hash bytea, p_code_subject bytea, p_code_digits integer,
    p_code_ttl double precision
) RETURNS TABLE (
    result text, id uuid, status text, expires_at timestamptz, outbox_id bigint,
    retry_after integer, limit_scope text
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    answer record;
BEGIN
    SELECT * INTO answer FROM notifier.request_v4(
        p_id, p_user_id, p_email, p_mailbox, p_suppression_key, p_purpose, p_locale,
        p_token_key_id, p_token_nonce, p_token_hash, p_ttl, p_message_id, p_max_attempts,
        p_traceparent, p_tracestate, p_idempotency_key, p_fingerprint, p_known_fingerprints,
        p_idempotency_ttl, p_client_id, p_resend_limit, p_window, p_budget_scopes,
        p_budget_subjects, p_budget_limits, p_slice, p_replaces, p_return_to) r;
    IF answer.result = 'accepted' AND p_method <> 'link' THEN
        UPDATE notifier.verifications v
        SET method = p_method, code_hash = p_code_hash, code_subject = p_code_subject,
            code_digits = p_code_digits,
            code_expires_at = least(v.expires_at,
                                    v.created_at + make_interval(secs => p_code_ttl))
        WHERE v.id = p_id;
    END IF;
    RETURN QUERY SELECT answer.result, answer.id, answer.status, answer.expires_at,
                        answer.outbox_id, answer.retry_after, answer.limit_scope;
END;
$$;

-- Judges one submitted code for verification p_id, and counts it, in one statement.
-- p_key_ids and p_code_hashes: the submitted code's keyed hash under every configured
-- secret (the verification's token_key_id picks one; a code made with a secret no longer
-- configured is revoked, like its link). p_client_id: the calling API key (NULL: the
-- application's own code, which may confirm any). The order of the answers:
--   not_found   no such verification, or not the caller's;
--   no_code     a link-only verification (nothing judged, nothing counted);
--   already_verified, then expired (superseded: with superseded_by; the code's lifetime
--               over; the secret revoked; the address scrubbed);
--   locked      p_max_failures wrong codes locked it (locked_by attempts), or its mailbox
--               spent p_mailbox_failures wrong codes within p_window seconds, over every
--               verification of that mailbox (locked_by mailbox, with retry_after: when the
--               oldest of them leave the window), counted in slices of p_slice seconds;
--   verified    the code is right: confirmed now (the verification.confirmed event);
--   wrong       counted, with attempts_remaining; the one that spends the last locks it
--               (the verification.code_locked event).
-- A code is judged only past every refusal, so a locked or spent verification never
-- learns whether a guess was right.
CREATE FUNCTION notifier.confirm_code_v1(
    p_id uuid, p_client_id text, p_key_ids text[], p_code_hashes bytea[],
    p_max_failures integer, p_mailbox_failures integer, p_window double precision,
    p_slice double precision
) RETURNS TABLE (
    result text, attempts_remaining integer, superseded_by uuid, locked_by text,
    retry_after integer
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v notifier.verifications;
    spent bigint;
    earliest timestamptz;
    candidate bytea;
BEGIN
    -- Who asked for it never changes: a caller it is not for is answered before it takes
    -- any lock.
    SELECT * INTO v FROM notifier.verifications w WHERE w.id = p_id;
    IF NOT FOUND OR (p_client_id IS NOT NULL AND v.client_id IS DISTINCT FROM p_client_id
       AND NOT EXISTS (
           WITH RECURSIVE earlier AS (
               SELECT e.id, e.client_id, 1 AS depth FROM notifier.verifications e
               WHERE e.superseded_by = v.id
               UNION ALL
               SELECT e.id, e.client_id, r.depth + 1
               FROM earlier r JOIN notifier.verifications e ON e.superseded_by = r.id
               WHERE r.depth < 20
           )
           SELECT FROM earlier r WHERE r.client_id = p_client_id)) THEN
        RETURN QUERY SELECT 'not_found', NULL::integer, NULL::uuid, NULL::text, NULL::integer;
        RETURN;
    END IF;
    IF v.method = 'link' THEN
        RETURN QUERY SELECT 'no_code', NULL::integer, NULL::uuid, NULL::text, NULL::integer;
        RETURN;
    END IF;
    -- The mailbox's lock, then the row's: guesses at two verifications of one mailbox are
    -- counted one after the other, and two at one verification too.
    PERFORM pg_advisory_xact_lock(
        hashtextextended('notifier.code:' || encode(v.code_subject, 'hex'), 0));
    SELECT * INTO v FROM notifier.verifications w WHERE w.id = p_id FOR UPDATE;
    IF NOT FOUND THEN  -- deleted by retention meanwhile
        RETURN QUERY SELECT 'not_found', NULL::integer, NULL::uuid, NULL::text, NULL::integer;
        RETURN;
    END IF;
    IF v.verified_at IS NOT NULL THEN
        RETURN QUERY SELECT 'already_verified', NULL::integer, NULL::uuid, NULL::text,
                            NULL::integer;
        RETURN;
    END IF;
    IF v.superseded_at IS NOT NULL OR v.code_expires_at <= now() OR v.scrubbed_at IS NOT NULL
       OR NOT (v.token_key_id = ANY (p_key_ids)) THEN
        RETURN QUERY SELECT 'expired', NULL::integer, v.superseded_by, NULL::text,
                            NULL::integer;
        RETURN;
    END IF;
    IF v.code_locked_at IS NOT NULL THEN
        RETURN QUERY SELECT 'locked', 0, NULL::uuid, 'attempts', NULL::integer;
        RETURN;
    END IF;
    SELECT coalesce(sum(c.count), 0), min(c.slice) INTO spent, earliest
    FROM notifier.request_counts c
    WHERE c.scope = 'code_failures' AND c.subject = v.code_subject
      AND c.slice > now() - make_interval(secs => p_window);
    IF spent >= p_mailbox_failures THEN
        RETURN QUERY SELECT 'locked', greatest(p_max_failures - v.code_failures, 0),
                            NULL::uuid, 'mailbox',
                            greatest(ceil(extract(epoch FROM earliest
                                + make_interval(secs => p_window) - now()))::integer, 1);
        RETURN;
    END IF;

    candidate := p_code_hashes[array_position(p_key_ids, v.token_key_id)];
    IF coalesce(notifier.digests_equal_v1(candidate, v.code_hash), false) THEN
        UPDATE notifier.verifications w SET verified_at = now() WHERE w.id = p_id;
        RETURN QUERY SELECT 'verified', NULL::integer, NULL::uuid, NULL::text, NULL::integer;
        RETURN;
    END IF;
    UPDATE notifier.verifications w
    SET code_failures = w.code_failures + 1,
        code_locked_at = CASE WHEN w.code_failures + 1 >= p_max_failures THEN now() END
    WHERE w.id = p_id;
    -- One counter row per slice: the mailbox's lock already orders every writer of it.
    INSERT INTO notifier.request_counts AS c (scope, subject, slice, shard, count)
    VALUES ('code_failures', v.code_subject,
            to_timestamp(floor(extract(epoch FROM now()) / p_slice) * p_slice), 0, 1)
    ON CONFLICT (scope, subject, slice, shard) DO UPDATE SET count = c.count + 1;
    RETURN QUERY SELECT 'wrong', greatest(p_max_failures - v.code_failures - 1, 0),
                        NULL::uuid, NULL::text, NULL::integer;
END;
$$;

-- claim_v3 (schema 0013) with what the email of each row needs of its code: its method,
-- and the code's length and lifetime (the code itself is derived at send time, like the
-- token). Everything else is claim_v3's, case for case; claim_v3 stays for workers of the
-- previous release during a rollout.
CREATE FUNCTION notifier.claim_v4(
    candidate_ids bigint[], owner text, lease_seconds double precision, discovery text
) RETURNS TABLE (
    id bigint, status text, lease_token uuid, attempts integer, max_attempts integer,
    message_id text, verification_id uuid, discovered_by text, traceparent text,
    tracestate text, fate text, previous_status text, user_id text, email text,
    purpose text, token_key_id text, token_nonce bytea, expires_at timestamptz,
    claimed_at timestamptz, locale text, issued_at timestamptz,
    method text, code_digits smallint, code_expires_at timestamptz
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
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
               v.locale, v.created_at AS issued_at, v.method, v.code_digits,
               v.code_expires_at,
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
                  f.previous_claimed_at, f.locale, f.issued_at, f.method, f.code_digits,
                  f.code_expires_at
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
           c.expires_at, c.claimed_at, c.locale, c.issued_at, c.method, c.code_digits,
           c.code_expires_at
    FROM claimed c
    ORDER BY c.id;
END;
$$;

-- verifications_changed_v1 (schema 0016) with one line more: verification.code_locked,
-- when the wrong code that spent the last attempt locked it.
CREATE OR REPLACE FUNCTION notifier.verifications_changed_v1() RETURNS trigger
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
         o.lapsed_at IS NULL AND n.lapsed_at IS NOT NULL, '{}'::jsonb),
        ('verification.code_locked', 'locked',
         o.code_locked_at IS NULL AND n.code_locked_at IS NOT NULL,
         jsonb_build_object('code_failures', n.code_failures))
    ) AS c(type, status, happened, extra)
    WHERE c.happened;
    RETURN NULL;
END;
$$;

SELECT notifier.regrant_runtime_v1();
