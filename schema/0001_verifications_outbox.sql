-- Why: the delivery contract (DESIGN.md). A verification and the outbox row for its email are
-- written in one transaction; an insert trigger wakes the workers with the new outbox ids;
-- workers claim rows under a lease and complete them only while they hold it.
-- Everything lives in its own schema so the library call can share an application's database.

CREATE SCHEMA IF NOT EXISTS notifier;

-- The migration runner's ledger. It is created by the first migration so that DDL stays here.
CREATE TABLE notifier.schema_migrations (
    version     integer PRIMARY KEY,
    name        text        NOT NULL,
    checksum    text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE notifier.verifications (
    id                  uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id             text        NOT NULL CHECK (length(user_id) BETWEEN 1 AND 200),
    email               text        NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    purpose             text        NOT NULL DEFAULT 'signup'
                                    CHECK (purpose ~ '^[a-z][a-z0-9_.-]{0,63}$'),
    -- The token is derived from a server secret (selected by key id) and this nonce; only
    -- a hash of it is stored, so a dump of this table alone cannot produce a valid link.
    token_key_id        text        NOT NULL CHECK (length(token_key_id) BETWEEN 1 AND 32),
    token_nonce         bytea       NOT NULL CHECK (length(token_nonce) >= 16),
    token_hash          bytea       NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    expires_at          timestamptz NOT NULL,
    verified_at         timestamptz,
    superseded_at       timestamptz,
    -- Idempotency-Key of the request that created the row, with a fingerprint of its body so
    -- a replay with a different body is told apart; NULL once the key has expired.
    idempotency_key     text        CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_fingerprint bytea,
    created_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (verified_at IS NULL OR superseded_at IS NULL)
);

CREATE UNIQUE INDEX verifications_idempotency_key_key
    ON notifier.verifications (idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Supersession and resend throttling look up a recipient's recent verifications.
CREATE INDEX verifications_user_email_purpose_idx
    ON notifier.verifications (user_id, email, purpose, created_at);
CREATE INDEX verifications_email_created_idx
    ON notifier.verifications (email, created_at);

-- How an attempt ended, and so how a row last changed. From SMTP: sent, transient (4xx or
-- no connection), permanent (5xx), unknown (the connection died after the body: the server
-- may have kept it). Settled without sending: expired, superseded, verified. Lease events:
-- lease_lost (a completion found its lease gone), lease_expired (the worker vanished
-- mid-attempt), released (shutdown handed the row back before sending anything).
CREATE DOMAIN notifier.delivery_outcome AS text CHECK (VALUE IN (
    'sent', 'transient', 'permanent', 'unknown',
    'expired', 'superseded', 'verified',
    'lease_lost', 'lease_expired', 'released'
));

CREATE DOMAIN notifier.discovery AS text CHECK (VALUE IN (
    'notify', 'sweep', 'retry_timer', 'expired_lease', 'poll'
));

CREATE TABLE notifier.email_outbox (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    verification_id     uuid        NOT NULL UNIQUE
                                    REFERENCES notifier.verifications (id) ON DELETE CASCADE,
    status              text        NOT NULL DEFAULT 'pending'
                                    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'expired')),
    attempts            integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts        integer     NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 100),
    -- Attempts that ended without knowing whether the server kept the message.
    unknown_outcomes    integer     NOT NULL DEFAULT 0 CHECK (unknown_outcomes >= 0),
    next_attempt_at     timestamptz NOT NULL DEFAULT now(),
    lease_owner         text,
    lease_token         uuid,
    lease_until         timestamptz,
    -- When the current or last claim took the row (database clock).
    claimed_at          timestamptz,
    -- How the current or last claim found the row.
    discovered_by       notifier.discovery,
    -- Stable across every attempt, so duplicates after an ambiguous outcome can be told apart.
    message_id          text        NOT NULL UNIQUE CHECK (length(message_id) BETWEEN 5 AND 255),
    provider_message_id text,
    last_outcome        notifier.delivery_outcome,
    last_error          text,
    -- W3C trace context of the request that enqueued the row.
    traceparent         text,
    tracestate          text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    completed_at        timestamptz,
    -- Exactly the sending rows hold a lease (invariant 1).
    CONSTRAINT email_outbox_lease_iff_sending CHECK (
        (status = 'sending') = (lease_token IS NOT NULL AND lease_until IS NOT NULL AND lease_owner IS NOT NULL)
    ),
    CONSTRAINT email_outbox_completed_iff_terminal CHECK (
        (status IN ('sent', 'failed', 'expired')) = (completed_at IS NOT NULL)
    )
);

-- Serves the sweep and the retry timer: due pending rows in due order. Small, because only
-- pending rows are in it.
CREATE INDEX email_outbox_pending_due_idx
    ON notifier.email_outbox (next_attempt_at) WHERE status = 'pending';
-- Serves the sweep's search for leases that expired (their worker died).
CREATE INDEX email_outbox_sending_lease_idx
    ON notifier.email_outbox (lease_until) WHERE status = 'sending';

-- Announces outbox ids on the versioned channel, in payloads of at most 300 ids:
-- {"v":1,"ids":[...]}. Even 19-digit ids stay well under PostgreSQL's 8000-byte payload
-- limit. Returns the number of notifications sent.
CREATE FUNCTION notifier.announce_v1(ids bigint[]) RETURNS integer
LANGUAGE sql AS $$
    SELECT count(pg_notify('notifier_outbox_v1', payload))::integer
    FROM (
        SELECT json_build_object('v', 1, 'ids', json_agg(id ORDER BY id))::text AS payload
        FROM (
            SELECT id, (row_number() OVER (ORDER BY id) - 1) / 300 AS chunk
            FROM unnest(ids) AS id
        ) numbered
        GROUP BY chunk
    ) payloads;
$$;

-- One notification per statement, not per row: a bulk insert of 500 rows costs two NOTIFYs
-- (PostgreSQL serialises the commits of notifying transactions, so fewer is cheaper). Only
-- rows due now are announced; scheduled rows are found by the workers' retry timer and sweep.
CREATE FUNCTION notifier.notify_outbox_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[];
BEGIN
    SELECT array_agg(id ORDER BY id) INTO ids
    FROM new_rows WHERE status = 'pending' AND next_attempt_at <= now();
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    -- The usual insert: one payload built here (prepared once per session); only bulk
    -- inserts of more than 300 rows pay for announce_v1's chunking.
    IF cardinality(ids) <= 300 THEN
        PERFORM pg_notify('notifier_outbox_v1',
                          '{"v":1,"ids":[' || array_to_string(ids, ',') || ']}');
    ELSE
        PERFORM notifier.announce_v1(ids);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER email_outbox_notify_v1
    AFTER INSERT ON notifier.email_outbox
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION notifier.notify_outbox_v1();
