-- Why: finished deliveries are kept for support and statistics, then their addresses are
-- scrubbed and finally the rows deleted (`notifier cleanup`, or the worker on a schedule).
-- Both passes walk finished rows oldest first, so they get an index of their own.

ALTER TABLE notifier.verifications ADD COLUMN scrubbed_at timestamptz;

CREATE INDEX email_outbox_completed_idx
    ON notifier.email_outbox (completed_at) WHERE completed_at IS NOT NULL;
