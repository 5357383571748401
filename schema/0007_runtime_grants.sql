-- Why: least privilege. Migrations run as the schema's owner; `notifier api`, `worker`,
-- `stats` and `cleanup` need only to read and write rows, never to change the schema, read
-- key hashes beyond their own lookups, or grant anything. `notifier grants ROLE` calls
-- grant_runtime_v1 to give an existing role exactly that, and records the role: a later
-- migration that adds a table replaces the function and ends by granting every recorded
-- role again (SELECT notifier.grant_runtime_v1(role) FROM notifier.runtime_roles), so a
-- deployment's runtime role keeps up with the schema without a manual step.

CREATE TABLE notifier.runtime_roles (
    role        name        PRIMARY KEY,
    granted_at  timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION notifier.grant_runtime_v1(runtime_role name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA notifier TO %I', runtime_role);
    -- Readiness checks that the schema is current.
    EXECUTE format('GRANT SELECT ON notifier.schema_migrations TO %I', runtime_role);
    -- Requests insert; confirming, superseding, forgetting keys and scrubbing update;
    -- cleanup deletes (outbox rows and attempts go with them by cascade).
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.verifications TO %I',
                   runtime_role);
    -- Claims, renewals and completions update (FOR UPDATE needs UPDATE as well).
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON notifier.email_outbox TO %I', runtime_role);
    EXECUTE format('GRANT SELECT, INSERT ON notifier.delivery_attempts TO %I', runtime_role);
    -- Workers suppress; the internal API lists and clears (admin scope).
    EXECUTE format('GRANT SELECT, INSERT, DELETE ON notifier.suppressed_addresses TO %I',
                   runtime_role);
    -- The API authenticates keys and notes when each was last used; creating and revoking
    -- keys is an operator's job, done as the owner.
    EXECUTE format('GRANT SELECT, UPDATE (last_used_at) ON notifier.api_keys TO %I',
                   runtime_role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION notifier.claim_v1(bigint[], text, double precision, text), '
                   'notifier.announce_v1(bigint[]) TO %I', runtime_role);
    INSERT INTO notifier.runtime_roles (role) VALUES (runtime_role)
    ON CONFLICT (role) DO UPDATE SET granted_at = now();
END;
$$;

-- Only the owner grants; the runtime role must not be able to call it on itself.
REVOKE EXECUTE ON FUNCTION notifier.grant_runtime_v1(name) FROM PUBLIC;
