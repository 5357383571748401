-- Why: signing out of the internal listener must end the session, not only the browser's
-- copy of its cookie (a copied cookie would otherwise work for its whole lifetime). Sessions
-- are stateless signed cookies naming a key and when they were issued; signing out records
-- on the key that sessions issued before now are void. It ends every session of that key.

ALTER TABLE notifier.api_keys ADD COLUMN sessions_valid_after timestamptz;

-- The runtime role records sign-outs (the API signs people out as itself), and is granted
-- every function by the schema, not by name.
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
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.suppressed_addresses TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.request_counts TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, UPDATE (last_used_at, sessions_valid_after) '
                   'ON notifier.api_keys TO %I', runtime_role);
    -- Every function (claim_vN, announce_vN, those later versions add), so a migration that
    -- adds one needs only end with regrant_runtime_v1(); never the granting ones.
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA notifier TO %I', runtime_role);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION notifier.grant_runtime_v1(name), '
                   'notifier.regrant_runtime_v1() FROM %I', runtime_role);
    INSERT INTO notifier.runtime_roles (role, role_oid) VALUES (runtime_role, current_oid)
    ON CONFLICT (role) DO UPDATE SET role_oid = excluded.role_oid, granted_at = now();
END;
$$;
REVOKE EXECUTE ON FUNCTION notifier.grant_runtime_v1(name) FROM PUBLIC;
SELECT notifier.regrant_runtime_v1();
