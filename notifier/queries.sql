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
