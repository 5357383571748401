-- The soak's statements: what it reads from outside the product, and the one fault it
-- injects through SQL. Each entry starts with "-- name: <name>" and its parameters.

-- name: backlog
-- No parameters. Rows not yet terminal; the age of the oldest (since it was requested) and of
-- the longest-overdue due row nobody has claimed. A sequential scan of a few thousand rows.
SELECT count(*) FILTER (WHERE status IN ('pending', 'sending')) AS open,
       count(*) AS total,
       extract(epoch FROM now() - min(created_at)
                          FILTER (WHERE status IN ('pending', 'sending')))::float8
           AS oldest_open_seconds,
       extract(epoch FROM now() - min(next_attempt_at)
                          FILTER (WHERE status = 'pending' AND next_attempt_at <= now()))::float8
           AS oldest_due_seconds
FROM notifier.email_outbox;

-- name: terminate_a_listener
-- $1: any text, a seed choosing which one. Ends one worker's LISTEN connection from
-- the server side, as a failover or an idle-connection killer would; returns its pid.
SELECT pid, pg_terminate_backend(pid) AS terminated
FROM pg_stat_activity
WHERE application_name = 'notifier-listener'
ORDER BY md5(pid::text || $1)
LIMIT 1;

-- name: leased_by
-- $1: a lease owner. Rows it still holds (a clean exit must leave none).
SELECT count(*) FROM notifier.email_outbox WHERE status = 'sending' AND lease_owner = $1;

-- name: rows
-- No parameters. Every outbox row with its verification's recipient.
SELECT o.id, o.verification_id, o.status, o.attempts, o.max_attempts, o.unknown_outcomes,
       o.message_id, o.last_outcome, o.last_error, o.lease_owner, o.lease_token,
       o.created_at, o.completed_at, v.user_id, v.email
FROM notifier.email_outbox o
JOIN notifier.verifications v ON v.id = o.verification_id
ORDER BY o.id;

-- name: attempts
-- No parameters. Every recorded attempt, in the order they were recorded.
SELECT id, outbox_id, attempt, lease_owner, lease_token, discovered_by, outcome, smtp_code,
       body_sent, lease_held, claimed_at, finished_at
FROM notifier.delivery_attempts
ORDER BY id;

-- name: tables
-- No parameters. The product's tables, for the dump the token check reads.
SELECT tablename FROM pg_tables WHERE schemaname = 'notifier' ORDER BY tablename;
