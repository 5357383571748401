-- Why: least privilege. Migrations run as the schema's owner; `notifier api`, `worker`,
-- `stats` and `cleanup` need only to read and write rows, never to change the schema,
-- create or alter API keys, rewrite delivery history, or grant anything. `notifier grants
-- ROLE` calls grant_runtime_v1 to give an existing role exactly that, and records the role
-- (by name and oid): a later migration that adds a table replaces the function and ends
-- with `SELECT notifier.regrant_runtime_v1()`, which grants every recorded role again, so a
-- deployment's runtime role keeps up with the schema without a manual step. A recorded role
-- that was dropped (or whose name now belongs to another role) is forgotten, not granted.

CREATE TABLE notifier.runtime_roles (
    role        name        PRIMARY KEY,
    role_oid    oid         NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION notifier.grant_runtime_v1(runtime_role name) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    current_oid oid := (SELECT oid FROM pg_roles WHERE rolname = runtime_role);
BEGIN
    IF current_oid IS NULL THEN
        -- Retired since it was recorded: nothing to grant, nothing to remember.
        DELETE FROM notifier.runtime_roles WHERE role = runtime_role;
        RETURN;
    END IF;
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
    -- The API authenticates keys (it reads their hashes, which let nobody call the API: they
    -- are of 256-bit secrets) and notes when each was last used; creating and revoking keys
    -- is an operator's job, done as the owner.
    EXECUTE format('GRANT SELECT, UPDATE (last_used_at) ON notifier.api_keys TO %I',
                   runtime_role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION notifier.claim_v1(bigint[], text, double precision, text), '
                   'notifier.announce_v1(bigint[]) TO %I', runtime_role);
    INSERT INTO notifier.runtime_roles (role, role_oid) VALUES (runtime_role, current_oid)
    ON CONFLICT (role) DO UPDATE SET role_oid = excluded.role_oid, granted_at = now();
END;
$$;

-- Grants every recorded role again (for migrations that add tables); forgets those that are
-- gone or whose name another role has taken. Returns how many were granted.
CREATE FUNCTION notifier.regrant_runtime_v1() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    granted integer := 0;
    recorded record;
BEGIN
    DELETE FROM notifier.runtime_roles r
    WHERE NOT EXISTS (SELECT 1 FROM pg_roles p WHERE p.rolname = r.role AND p.oid = r.role_oid);
    FOR recorded IN SELECT role FROM notifier.runtime_roles ORDER BY role LOOP
        PERFORM notifier.grant_runtime_v1(recorded.role);
        granted := granted + 1;
    END LOOP;
    RETURN granted;
END;
$$;

-- Only the owner grants; the runtime role must not be able to call these on itself.
REVOKE EXECUTE ON FUNCTION notifier.grant_runtime_v1(name) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION notifier.regrant_runtime_v1() FROM PUBLIC;
