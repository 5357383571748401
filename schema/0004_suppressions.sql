-- Why: an address the mail server refused permanently (a 5xx) must not be mailed again by
-- every new signup attempt; that burns sender reputation. Requests for a suppressed address
-- get a clear error until an operator clears it (`notifier suppressions clear`).

CREATE TABLE notifier.suppressed_addresses (
    email           text        PRIMARY KEY,
    reason          text        NOT NULL,
    smtp_code       integer,
    outbox_id       bigint      REFERENCES notifier.email_outbox (id) ON DELETE SET NULL,
    suppressed_at   timestamptz NOT NULL DEFAULT now()
);

-- Throttling counts a user's recent requests across addresses and purposes.
CREATE INDEX verifications_user_created_idx ON notifier.verifications (user_id, created_at);
