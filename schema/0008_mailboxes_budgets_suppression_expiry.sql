-- Why: limits must count mailboxes, not spellings (invariant 10). `Victim@`, `vIctim@` and
-- `victim+1@` are one mailbox, so each verification records its canonical mailbox
-- (lowercased, sub-address tag stripped, IDNA domain), and the per-user and per-mailbox
-- limits and suppressions look it up. Budgets that span many requests (per domain, per
-- client, everything) cannot count history on every request; they keep small counters,
-- one row per subject per slice of the window (a sixtieth of it), spread over a few shards
-- so that concurrent requests rarely wait on one row. Subjects are keyed hashes, never
-- addresses. Suppressions now expire and fall under retention.

-- Set by every request; NULL only for rows written around request_verification (bulk loads),
-- which count for no mailbox's limit and are suppressed under their lowercased address.
ALTER TABLE notifier.verifications ADD COLUMN mailbox text
    CHECK (length(mailbox) BETWEEN 3 AND 254);
-- Rows from before this migration: their address lowercased (tags were not known apart).
UPDATE notifier.verifications SET mailbox = lower(email);
DROP INDEX notifier.verifications_email_created_idx;
CREATE INDEX verifications_mailbox_created_idx ON notifier.verifications (mailbox, created_at);

CREATE TABLE notifier.request_counts (
    scope   text        NOT NULL CHECK (scope IN ('domain', 'client', 'global')),
    -- HMAC of the domain or client id under the server secret (empty for global).
    subject bytea       NOT NULL,
    -- Start of the slice of the window the requests fell in.
    slice   timestamptz NOT NULL,
    shard   smallint    NOT NULL CHECK (shard >= 0),
    count   integer     NOT NULL CHECK (count > 0),
    PRIMARY KEY (scope, subject, slice, shard)
);
-- Retention deletes slices that left the window.
CREATE INDEX request_counts_slice_idx ON notifier.request_counts (slice);

-- Suppressions are keyed by canonical mailbox; existing entries are folded to lowercase.
DELETE FROM notifier.suppressed_addresses s
WHERE s.email <> lower(s.email)
  AND EXISTS (SELECT 1 FROM notifier.suppressed_addresses t WHERE t.email = lower(s.email));
UPDATE notifier.suppressed_addresses SET email = lower(email) WHERE email <> lower(email);
-- NULL: never expires (entries from before this migration, until an operator clears them).
ALTER TABLE notifier.suppressed_addresses ADD COLUMN expires_at timestamptz;
CREATE INDEX suppressed_addresses_expires_idx
    ON notifier.suppressed_addresses (expires_at) WHERE expires_at IS NOT NULL;

-- The runtime role counts requests (grant_runtime_v1 again, now with request_counts).
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
    EXECUTE format('GRANT SELECT, INSERT ON notifier.delivery_attempts TO %I', runtime_role);
    -- Workers suppress (and extend); the internal API lists and clears; cleanup expires.
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.suppressed_addresses TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.request_counts TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, UPDATE (last_used_at) ON notifier.api_keys TO %I',
                   runtime_role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION notifier.claim_v1(bigint[], text, double precision, text), '
                   'notifier.announce_v1(bigint[]) TO %I', runtime_role);
    INSERT INTO notifier.runtime_roles (role, role_oid) VALUES (runtime_role, current_oid)
    ON CONFLICT (role) DO UPDATE SET role_oid = excluded.role_oid, granted_at = now();
END;
$$;
REVOKE EXECUTE ON FUNCTION notifier.grant_runtime_v1(name) FROM PUBLIC;
SELECT notifier.regrant_runtime_v1();
