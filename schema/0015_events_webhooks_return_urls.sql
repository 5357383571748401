-- Why: the app never heard what happened to a verification (it had to poll), and the person
-- who pressed Confirm had no way back into the app. This adds:
-- 1. events: one row per state change, written by triggers on the rows that change, so an
--    event exists exactly when its change committed, whichever statement (or release) made
--    the change, with no statement of its own. notifier.emit_v1 is the one way an event is
--    written: a later change of state emits with one PERFORM or one trigger. An event feed
--    reads them in commit order (by writing transaction), and NOTIFY notifier_events names
--    each on commit (off with `ALTER DATABASE ... SET notifier.event_notify = off`);
-- 2. webhook endpoints, and one delivery per event and subscribed endpoint, written with
--    the event and delivered by the workers under the same lease rules as email;
-- 3. a verification's return_to, kept by its resends (request_v4, confirm_v2), and an API
--    key's narrowing of the allowed return URLs.
-- request_v3 and confirm_v1 keep their signatures for processes of the previous release
-- during a rollout, and now run request_v4's and confirm_v2's bodies.

ALTER TABLE notifier.verifications
    ADD COLUMN return_to text CHECK (length(return_to) BETWEEN 1 AND 2048),
    -- When the lapse sweep found the link expired unconfirmed (its verification.expired).
    ADD COLUMN lapsed_at timestamptz;
-- Links that lapsed before this release are not news: no event for them.
UPDATE notifier.verifications SET lapsed_at = expires_at
WHERE expires_at <= now() AND verified_at IS NULL AND superseded_at IS NULL;
-- The lapse sweep's search: live-looking links, by when they expire.
CREATE INDEX verifications_lapsing_idx ON notifier.verifications (expires_at)
    WHERE verified_at IS NULL AND superseded_at IS NULL AND lapsed_at IS NULL;

-- NULL: the allow-list of NOTIFIER_RETURN_URLS as it is; else only its URLs this key may use.
ALTER TABLE notifier.api_keys
    ADD COLUMN return_urls text[] CHECK (cardinality(return_urls) BETWEEN 1 AND 50);

CREATE TABLE notifier.events (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The id the feed and webhooks name it by (evt_ and 32 hex digits), the same in every
    -- retry of every delivery of it.
    uid             uuid        NOT NULL DEFAULT gen_random_uuid(),
    -- The writing transaction: the feed reads events in commit order and never past a
    -- transaction still open, so a cursor never moves past an event yet to commit.
    tx              xid8        NOT NULL DEFAULT pg_current_xact_id(),
    type            text        NOT NULL CHECK (type ~ '^[a-z]+(\.[a-z_]+)+$'),
    verification_id uuid,
    occurred_at     timestamptz NOT NULL DEFAULT now(),
    data            jsonb       NOT NULL
);
CREATE INDEX events_feed_idx ON notifier.events (tx, id);
CREATE INDEX events_verification_idx ON notifier.events (verification_id)
    WHERE verification_id IS NOT NULL;
-- Pruning by age: rows arrive in time order, so a block range index is enough.
CREATE INDEX events_occurred_idx ON notifier.events USING brin (occurred_at);

CREATE TABLE notifier.webhook_endpoints (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    url             text        NOT NULL CHECK (length(url) BETWEEN 8 AND 2048),
    -- NULL: every event type.
    event_types     text[]      CHECK (cardinality(event_types) >= 1),
    description     text        CHECK (length(description) <= 200),
    -- The signing secret is derived from NOTIFIER_TOKEN_SECRET's secret of this key id and
    -- this nonce (notifier.webhook_signing): a dump of this table cannot sign.
    secret_key_id   text        NOT NULL CHECK (length(secret_key_id) BETWEEN 1 AND 32),
    secret_nonce    bytea       NOT NULL CHECK (length(secret_nonce) >= 16),
    -- The secret before the last rotation, which signs too until previous_until.
    previous_key_id text,
    previous_nonce  bytea,
    previous_until  timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Since when every delivery to it has failed (NULL: its last one succeeded).
    failing_since   timestamptz,
    last_success_at timestamptz,
    last_failure_at timestamptz,
    disabled_at     timestamptz,
    disabled_reason text,
    CHECK ((previous_key_id IS NULL) = (previous_nonce IS NULL)
           AND (previous_key_id IS NULL) = (previous_until IS NULL)),
    CHECK ((disabled_at IS NULL) = (disabled_reason IS NULL))
);

CREATE TABLE notifier.webhook_deliveries (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id         bigint      NOT NULL REFERENCES notifier.events (id) ON DELETE CASCADE,
    endpoint_id      uuid        NOT NULL REFERENCES notifier.webhook_endpoints (id)
                                 ON DELETE CASCADE,
    status           text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'sending', 'delivered', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- Attempts whose request went out with no answer (or whose worker vanished mid-way):
    -- each may have reached the receiver, so a later delivery may be a duplicate.
    unknown_outcomes integer     NOT NULL DEFAULT 0 CHECK (unknown_outcomes >= 0),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_token      uuid,
    lease_until      timestamptz,
    last_status_code integer,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    UNIQUE (event_id, endpoint_id),
    CONSTRAINT webhook_deliveries_lease_iff_sending CHECK (
        (status = 'sending') = (lease_token IS NOT NULL AND lease_until IS NOT NULL
                                AND lease_owner IS NOT NULL)),
    CONSTRAINT webhook_deliveries_completed_iff_final CHECK (
        (status IN ('delivered', 'dead')) = (completed_at IS NOT NULL))
);
-- The claim looks at each endpoint's own line, so one endpoint's backlog never hides
-- another's deliveries.
CREATE INDEX webhook_deliveries_due_idx
    ON notifier.webhook_deliveries (endpoint_id, next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_lease_idx
    ON notifier.webhook_deliveries (endpoint_id, lease_until) WHERE status = 'sending';
CREATE INDEX webhook_deliveries_endpoint_idx ON notifier.webhook_deliveries (endpoint_id, id);

CREATE TABLE notifier.webhook_attempts (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id    bigint      NOT NULL REFERENCES notifier.webhook_deliveries (id)
                               ON DELETE CASCADE,
    attempt        integer     NOT NULL,
    lease_owner    text        NOT NULL,
    -- notifier.webhook_outcomes.AttemptOutcome, and lease_expired (its worker vanished).
    outcome        text        NOT NULL CHECK (outcome IN (
                       'delivered', 'failed', 'unknown', 'gone', 'throttled', 'refused',
                       'lease_expired', 'lease_lost')),
    status_code    integer,
    -- What went wrong, or the start of the receiver's answer: never more than 300 characters.
    detail         text        CHECK (length(detail) <= 300),
    duration_ms    double precision,
    lease_held     boolean     NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_attempts_delivery_idx ON notifier.webhook_attempts (delivery_id, id);

-- An address as logs and events show it: notifier.redact.redact_email, in SQL.
CREATE FUNCTION notifier.redacted_email_v1(address text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    -- The last @ splits it, as Python's rpartition does.
    SELECT CASE WHEN strpos(address, '@') = 0 THEN left(address, 1) || '***'
                ELSE left(left(address, length(address) - strpos(reverse(address), '@')), 1)
                     || '***@'
                     || substr(address, length(address) - strpos(reverse(address), '@') + 2)
           END
$$;

-- The one way an event is written. Its deliveries to the endpoints that subscribe to its
-- type are written with it (none while an endpoint is disabled: the feed still has it);
-- the workers hear of them on notifier_webhooks_v1, once per transaction.
CREATE FUNCTION notifier.emit_v1(p_type text, p_verification_id uuid, p_data jsonb)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    new_id bigint;
    new_uid uuid;
BEGIN
    INSERT INTO notifier.events (type, verification_id, data)
    VALUES (p_type, p_verification_id, p_data)
    RETURNING id, uid INTO new_id, new_uid;
    INSERT INTO notifier.webhook_deliveries (event_id, endpoint_id)
    SELECT new_id, e.id FROM notifier.webhook_endpoints e
    WHERE e.disabled_at IS NULL AND (e.event_types IS NULL OR p_type = ANY (e.event_types));
    IF FOUND THEN
        PERFORM pg_notify('notifier_webhooks_v1', '');
    END IF;
    IF current_setting('notifier.event_notify', true) IS DISTINCT FROM 'off' THEN
        PERFORM pg_notify('notifier_events', 'evt_' || replace(new_uid::text, '-', ''));
    END IF;
    RETURN new_id;
END;
$$;

-- What every verification event says: thin, never a token or an address.
CREATE FUNCTION notifier.verification_event_data_v1(v notifier.verifications, p_status text)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'verification_id', v.id, 'user_id', v.user_id, 'purpose', v.purpose,
        'client_id', v.client_id, 'status', p_status)
$$;

-- Events of a verification's own changes; TG_ARGV: the event type and the status it names.
CREATE FUNCTION notifier.verification_changed_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    data jsonb := notifier.verification_event_data_v1(NEW, TG_ARGV[1]);
BEGIN
    IF TG_ARGV[0] = 'verification.superseded' THEN
        data := data || jsonb_build_object('superseded_by', NEW.superseded_by);
    END IF;
    PERFORM notifier.emit_v1(TG_ARGV[0], NEW.id, data);
    RETURN NULL;
END;
$$;

CREATE TRIGGER verification_created AFTER INSERT ON notifier.verifications
    FOR EACH ROW EXECUTE FUNCTION
    notifier.verification_changed_v1('verification.created', 'pending');
CREATE TRIGGER verification_confirmed AFTER UPDATE OF verified_at ON notifier.verifications
    FOR EACH ROW WHEN (OLD.verified_at IS NULL AND NEW.verified_at IS NOT NULL)
    EXECUTE FUNCTION notifier.verification_changed_v1('verification.confirmed', 'verified');
CREATE TRIGGER verification_superseded AFTER UPDATE OF superseded_at ON notifier.verifications
    FOR EACH ROW WHEN (OLD.superseded_at IS NULL AND NEW.superseded_at IS NOT NULL)
    EXECUTE FUNCTION notifier.verification_changed_v1('verification.superseded', 'superseded');
CREATE TRIGGER verification_expired AFTER UPDATE OF lapsed_at ON notifier.verifications
    FOR EACH ROW WHEN (OLD.lapsed_at IS NULL AND NEW.lapsed_at IS NOT NULL)
    EXECUTE FUNCTION notifier.verification_changed_v1('verification.expired', 'expired');

-- Events of a delivery's end: sent (accepted by the mail server, with its reply's id) or
-- failed (with the reason's class: notifier.event_types.FailureReason).
CREATE FUNCTION notifier.delivery_ended_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v notifier.verifications;
    data jsonb;
BEGIN
    SELECT * INTO v FROM notifier.verifications WHERE id = NEW.verification_id;
    data := notifier.verification_event_data_v1(v, NEW.status);
    IF TG_ARGV[0] = 'verification.sent' THEN
        data := data || jsonb_build_object('provider_message_id', NEW.provider_message_id);
    ELSE
        data := data || jsonb_build_object('reason', CASE NEW.last_outcome
            WHEN 'permanent' THEN 'rejected'
            WHEN 'unknown' THEN 'outcome_unknown'
            ELSE 'attempts_exhausted' END);
    END IF;
    PERFORM notifier.emit_v1(TG_ARGV[0], NEW.verification_id, data);
    RETURN NULL;
END;
$$;

CREATE TRIGGER delivery_sent AFTER UPDATE OF status ON notifier.email_outbox
    FOR EACH ROW WHEN (OLD.status <> 'sent' AND NEW.status = 'sent' AND NEW.last_outcome = 'sent')
    EXECUTE FUNCTION notifier.delivery_ended_v1('verification.sent');
CREATE TRIGGER delivery_failed AFTER UPDATE OF status ON notifier.email_outbox
    FOR EACH ROW WHEN (OLD.status <> 'failed' AND NEW.status = 'failed')
    EXECUTE FUNCTION notifier.delivery_ended_v1('verification.failed');

-- An address suppressed (or suppressed again): the address only redacted.
CREATE FUNCTION notifier.address_suppressed_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    vid uuid := (SELECT o.verification_id FROM notifier.email_outbox o WHERE o.id = NEW.outbox_id);
BEGIN
    PERFORM notifier.emit_v1('email.suppressed', vid, jsonb_build_object(
        'email', notifier.redacted_email_v1(NEW.email), 'verification_id', vid,
        'smtp_code', NEW.smtp_code, 'expires_at', NEW.expires_at));
    RETURN NULL;
END;
$$;

CREATE TRIGGER address_suppressed AFTER INSERT ON notifier.suppressed_addresses
    FOR EACH ROW EXECUTE FUNCTION notifier.address_suppressed_v1();
CREATE TRIGGER address_suppressed_again AFTER UPDATE OF suppressed_at
    ON notifier.suppressed_addresses
    FOR EACH ROW WHEN (OLD.suppressed_at IS DISTINCT FROM NEW.suppressed_at)
    EXECUTE FUNCTION notifier.address_suppressed_v1();

-- request_v3 with the verification's return_to (checked by the caller against the allow-list;
-- NULL: none). Everything else is request_v3's (schema 0014), case for case.
CREATE FUNCTION notifier.request_v4(
    p_id uuid, p_user_id text, p_email text, p_mailbox text, p_suppression_key text,
    p_purpose text, p_locale text,
    p_token_key_id text, p_token_nonce bytea, p_token_hash bytea, p_ttl double precision,
    p_message_id text, p_max_attempts integer, p_traceparent text, p_tracestate text,
    p_idempotency_key text, p_fingerprint bytea, p_known_fingerprints bytea[],
    p_idempotency_ttl double precision, p_client_id text,
    p_resend_limit integer, p_window double precision,
    p_budget_scopes text[], p_budget_subjects bytea[], p_budget_limits integer[],
    p_slice double precision, p_replaces uuid, p_return_to text
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
    IF p_idempotency_key IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(
            'notifier.idempotency:' || coalesce(p_client_id, '') || ':' || p_idempotency_key, 0));
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(
        'notifier.user:' || coalesce(p_client_id, '') || ':' || p_user_id, 0));
    PERFORM pg_advisory_xact_lock(hashtextextended('notifier.mailbox:' || p_mailbox, 0));

    IF p_idempotency_key IS NOT NULL THEN
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
            RETURN QUERY SELECT
                CASE WHEN found_fingerprint = ANY(p_known_fingerprints)
                     THEN 'replayed' ELSE 'conflict' END,
                found_id, found_status, found_expires, NULL::bigint, NULL::integer, NULL::text;
            RETURN;
        END IF;
    END IF;

    IF EXISTS (SELECT 1 FROM notifier.suppressed_addresses s
               WHERE s.email = p_suppression_key
                 AND (s.expires_at IS NULL OR s.expires_at > now())) THEN
        RETURN QUERY SELECT 'suppressed', NULL::uuid, NULL::text, NULL::timestamptz,
                            NULL::bigint, NULL::integer, NULL::text;
        RETURN;
    END IF;

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

    INSERT INTO notifier.verifications AS v
        (id, user_id, email, purpose, token_key_id, token_nonce, token_hash, expires_at,
         idempotency_key, request_fingerprint, client_id, mailbox, locale, return_to)
    VALUES (p_id, p_user_id, p_email, p_purpose, p_token_key_id, p_token_nonce, p_token_hash,
            now() + make_interval(secs => p_ttl), p_idempotency_key,
            CASE WHEN p_idempotency_key IS NOT NULL THEN p_fingerprint END, p_client_id,
            p_mailbox, p_locale, p_return_to)
    RETURNING v.expires_at INTO new_expires;
    INSERT INTO notifier.email_outbox AS o
        (verification_id, message_id, max_attempts, traceparent, tracestate)
    VALUES (p_id, p_message_id, p_max_attempts, p_traceparent, p_tracestate)
    RETURNING o.id INTO new_outbox;

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

CREATE OR REPLACE FUNCTION notifier.request_v3(
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
LANGUAGE sql AS $$
    SELECT * FROM notifier.request_v4(
        p_id, p_user_id, p_email, p_mailbox, p_suppression_key, p_purpose, p_locale,
        p_token_key_id, p_token_nonce, p_token_hash, p_ttl, p_message_id, p_max_attempts,
        p_traceparent, p_tracestate, p_idempotency_key, p_fingerprint, p_known_fingerprints,
        p_idempotency_ttl, p_client_id, p_resend_limit, p_window, p_budget_scopes,
        p_budget_subjects, p_budget_limits, p_slice, p_replaces, NULL)
$$;

-- confirm_v1 (schema 0014) with the verification's return_to. Everything else is confirm_v1's.
CREATE FUNCTION notifier.confirm_v2(p_token_hash bytea, p_apply boolean)
RETURNS TABLE (
    id uuid, token_hash bytea, user_id text, email text, purpose text, client_id text,
    scrubbed_at timestamptz, locale text, verified_at timestamptz, superseded_at timestamptz,
    superseded_by uuid, successor_key text, expires_at timestamptz, expired boolean,
    confirmed_now boolean, user_verified boolean, client_valid boolean, newest_for_user boolean,
    return_to text
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
           NOT EXISTS (SELECT 1 FROM notifier.verifications w
                       WHERE w.user_id = v.user_id AND w.purpose = v.purpose
                         AND coalesce(w.client_id, '') = coalesce(v.client_id, '')
                         AND w.created_at > v.created_at),
           v.return_to
    FROM notifier.verifications v
    WHERE v.token_hash = p_token_hash;
END;
$$;

CREATE OR REPLACE FUNCTION notifier.confirm_v1(p_token_hash bytea, p_apply boolean)
RETURNS TABLE (
    id uuid, token_hash bytea, user_id text, email text, purpose text, client_id text,
    scrubbed_at timestamptz, locale text, verified_at timestamptz, superseded_at timestamptz,
    superseded_by uuid, successor_key text, expires_at timestamptz, expired boolean,
    confirmed_now boolean, user_verified boolean, client_valid boolean, newest_for_user boolean
)
LANGUAGE sql AS $$
    SELECT c.id, c.token_hash, c.user_id, c.email, c.purpose, c.client_id, c.scrubbed_at,
           c.locale, c.verified_at, c.superseded_at, c.superseded_by, c.successor_key,
           c.expires_at, c.expired, c.confirmed_now, c.user_verified, c.client_valid,
           c.newest_for_user
    FROM notifier.confirm_v2(p_token_hash, p_apply) c
$$;

-- Takes due webhook deliveries (and those whose worker's lease ran out) under fresh leases,
-- from each enabled endpoint's own line and at most p_per_endpoint in flight to one endpoint
-- across every worker, so one slow, dead or backlogged receiver never holds every webhook
-- slot nor hides another endpoint's deliveries. A delivery taken back from a vanished worker
-- records that attempt as lease_expired (an unknown outcome: its request may have gone out).
-- Returns what the sender needs: the event, the endpoint's URL and secrets.
CREATE FUNCTION notifier.claim_webhooks_v1(
    p_owner text, p_lease_seconds double precision, p_limit integer, p_per_endpoint integer
) RETURNS TABLE (
    id bigint, lease_token uuid, attempt integer, event_uid uuid, event_type text,
    occurred_at timestamptz, data jsonb, endpoint_id uuid, url text,
    secret_key_id text, secret_nonce bytea, previous_key_id text, previous_nonce bytea
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH room AS (
        SELECT e.id AS endpoint_id,
               p_per_endpoint - (SELECT count(*) FROM notifier.webhook_deliveries d
                                 WHERE d.endpoint_id = e.id AND d.status = 'sending'
                                   AND d.lease_until > now()) AS free
        FROM notifier.webhook_endpoints e
        WHERE e.disabled_at IS NULL
    ), lapsed AS (
        SELECT x.id, x.since, true AS lapsed
        FROM room r, LATERAL (
            SELECT d.id, d.lease_until AS since
            FROM notifier.webhook_deliveries d
            WHERE d.endpoint_id = r.endpoint_id AND d.status = 'sending'
              AND d.lease_until <= now()
            ORDER BY d.lease_until
            LIMIT least(r.free, p_limit)
            FOR UPDATE SKIP LOCKED) x
        WHERE r.free > 0
    ), due AS (
        SELECT x.id, x.since, false AS lapsed
        FROM room r, LATERAL (
            SELECT d.id, d.next_attempt_at AS since
            FROM notifier.webhook_deliveries d
            WHERE d.endpoint_id = r.endpoint_id AND d.status = 'pending'
              AND d.next_attempt_at <= now()
            ORDER BY d.next_attempt_at
            LIMIT least(r.free, p_limit)
            FOR UPDATE SKIP LOCKED) x
        WHERE r.free > 0
    ), chosen AS (
        -- Past each endpoint's free room, the oldest first (taken back leases come first).
        SELECT c.id, c.lapsed
        FROM (SELECT c.*, row_number() OVER (PARTITION BY d.endpoint_id
                                            ORDER BY c.lapsed DESC, c.since) AS k,
                     r.free
              FROM (SELECT * FROM lapsed UNION ALL SELECT * FROM due) c
              JOIN notifier.webhook_deliveries d ON d.id = c.id
              JOIN room r ON r.endpoint_id = d.endpoint_id) c
        WHERE c.k <= c.free
        ORDER BY c.since
        LIMIT p_limit
    ), vanished AS (
        INSERT INTO notifier.webhook_attempts
            (delivery_id, attempt, lease_owner, outcome, detail, lease_held)
        SELECT d.id, d.attempts, d.lease_owner, 'lease_expired',
               'the worker holding it vanished mid-attempt', false
        FROM chosen c JOIN notifier.webhook_deliveries d ON d.id = c.id
        WHERE c.lapsed
    ), taken AS (
        UPDATE notifier.webhook_deliveries d SET
            status = 'sending',
            attempts = d.attempts + 1,
            unknown_outcomes = d.unknown_outcomes + CASE WHEN c.lapsed THEN 1 ELSE 0 END,
            lease_owner = p_owner,
            lease_token = gen_random_uuid(),
            lease_until = now() + make_interval(secs => p_lease_seconds),
            updated_at = now()
        FROM chosen c
        WHERE d.id = c.id
        RETURNING d.id, d.lease_token, d.attempts, d.event_id, d.endpoint_id
    )
    SELECT t.id, t.lease_token, t.attempts, ev.uid, ev.type, ev.occurred_at, ev.data,
           t.endpoint_id, e.url, e.secret_key_id, e.secret_nonce,
           CASE WHEN e.previous_until > now() THEN e.previous_key_id END,
           CASE WHEN e.previous_until > now() THEN e.previous_nonce END
    FROM taken t
    JOIN notifier.events ev ON ev.id = t.event_id
    JOIN notifier.webhook_endpoints e ON e.id = t.endpoint_id;
END;
$$;

-- Ends webhook attempts that still hold their lease, as the sender decided
-- (notifier.webhook_outcomes): delivered; dead (its p_retry_delays NULL: the schedule is
-- spent, or the endpoint is gone); or due again after its delay. Every attempt is recorded,
-- held or not. An endpoint's health follows: a delivery ends its failing streak, a failure
-- starts one; 410 Gone, or failing for longer than p_disable_after seconds, disables it
-- with the reason (returned on the rows of the call that disabled it).
CREATE FUNCTION notifier.complete_webhooks_v1(
    p_ids bigint[], p_tokens uuid[], p_outcomes text[], p_status_codes integer[],
    p_details text[], p_durations_ms double precision[], p_retry_delays double precision[],
    p_owner text, p_disable_after double precision
) RETURNS TABLE (
    id bigint, status text, lease_held boolean, endpoint_id uuid, disabled_reason text
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT *
        FROM unnest(p_ids, p_tokens, p_outcomes, p_status_codes, p_details, p_durations_ms,
                    p_retry_delays)
             AS i(id, token, outcome, status_code, detail, duration_ms, retry_delay)
    ), updated AS (
        UPDATE notifier.webhook_deliveries d SET
            status = CASE WHEN i.outcome = 'delivered' THEN 'delivered'
                          WHEN i.retry_delay IS NULL THEN 'dead'
                          ELSE 'pending' END,
            next_attempt_at = CASE WHEN i.outcome <> 'delivered' AND i.retry_delay IS NOT NULL
                                   THEN now() + make_interval(secs => i.retry_delay)
                                   ELSE d.next_attempt_at END,
            unknown_outcomes = d.unknown_outcomes
                               + CASE WHEN i.outcome = 'unknown' THEN 1 ELSE 0 END,
            lease_owner = NULL, lease_token = NULL, lease_until = NULL,
            last_status_code = i.status_code,
            last_error = CASE WHEN i.outcome = 'delivered' THEN NULL ELSE i.detail END,
            completed_at = CASE WHEN i.outcome = 'delivered' OR i.retry_delay IS NULL
                                THEN now() END,
            updated_at = now()
        FROM input i
        WHERE d.id = i.id AND d.lease_token = i.token AND d.status = 'sending'
        RETURNING d.id, d.status, d.endpoint_id, d.attempts
    ), recorded AS (
        INSERT INTO notifier.webhook_attempts
            (delivery_id, attempt, lease_owner, outcome, status_code, detail, duration_ms,
             lease_held)
        SELECT i.id, coalesce(u.attempts, d.attempts), p_owner,
               CASE WHEN u.id IS NULL AND i.outcome <> 'unknown' THEN 'lease_lost'
                    ELSE i.outcome END,
               i.status_code, i.detail, i.duration_ms, u.id IS NOT NULL
        FROM input i
        JOIN notifier.webhook_deliveries d ON d.id = i.id
        LEFT JOIN updated u ON u.id = i.id
    ), health AS (
        SELECT u.endpoint_id,
               bool_or(i.outcome = 'delivered') AS delivered,
               bool_or(i.outcome = 'gone') AS gone,
               max(i.status_code) FILTER (WHERE i.outcome = 'gone') AS gone_code
        FROM updated u JOIN input i ON i.id = u.id
        GROUP BY u.endpoint_id
    ), endpoints AS (
        UPDATE notifier.webhook_endpoints e SET
            failing_since = CASE WHEN h.delivered THEN NULL
                                 ELSE coalesce(e.failing_since, now()) END,
            last_success_at = CASE WHEN h.delivered THEN now() ELSE e.last_success_at END,
            last_failure_at = CASE WHEN h.delivered THEN e.last_failure_at ELSE now() END,
            disabled_at = CASE
                WHEN e.disabled_at IS NOT NULL THEN e.disabled_at
                WHEN h.gone THEN now()
                WHEN NOT h.delivered AND e.failing_since
                     < now() - make_interval(secs => p_disable_after) THEN now()
                END,
            disabled_reason = CASE
                WHEN e.disabled_at IS NOT NULL THEN e.disabled_reason
                WHEN h.gone THEN 'the endpoint answered ' || h.gone_code || ' Gone'
                WHEN NOT h.delivered AND e.failing_since
                     < now() - make_interval(secs => p_disable_after)
                    THEN 'every delivery failed since '
                         || to_char(e.failing_since AT TIME ZONE 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                END
        FROM health h
        WHERE e.id = h.endpoint_id
        RETURNING e.id, CASE WHEN e.disabled_at = now() THEN e.disabled_reason END AS reason
    )
    -- disabled_reason: set on the rows whose endpoint this very call disabled.
    SELECT i.id, u.status, u.id IS NOT NULL, u.endpoint_id, x.reason
    FROM input i
    LEFT JOIN updated u ON u.id = i.id
    LEFT JOIN endpoints x ON x.id = u.endpoint_id;
END;
$$;

-- The runtime role also reads and writes events, endpoints and their deliveries.
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
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.events, '
                   'notifier.webhook_endpoints, notifier.webhook_deliveries, '
                   'notifier.webhook_attempts TO %I', runtime_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA notifier TO %I', runtime_role);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION notifier.grant_runtime_v1(name), '
                   'notifier.regrant_runtime_v1() FROM %I', runtime_role);
    INSERT INTO notifier.runtime_roles (role, role_oid) VALUES (runtime_role, current_oid)
    ON CONFLICT (role) DO UPDATE SET role_oid = excluded.role_oid, granted_at = now();
END;
$$;
REVOKE EXECUTE ON FUNCTION notifier.grant_runtime_v1(name) FROM PUBLIC;
SELECT notifier.regrant_runtime_v1();
