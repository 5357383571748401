-- Why: one row per delivery attempt, so support staff can read a delivery's timeline (who
-- claimed it, how it was found, what the mail server said) and the soak can explain every
-- duplicate receipt by a recorded unknown outcome or an expired lease.

CREATE TABLE notifier.delivery_attempts (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id           bigint      NOT NULL REFERENCES notifier.email_outbox (id) ON DELETE CASCADE,
    attempt             integer     NOT NULL CHECK (attempt >= 0),
    lease_owner         text        NOT NULL,
    lease_token         uuid        NOT NULL,
    discovered_by       notifier.discovery,
    outcome             notifier.delivery_outcome NOT NULL,
    smtp_code           integer     CHECK (smtp_code BETWEEN 100 AND 599),
    -- The server's reply or the error, with addresses redacted; safe to show.
    detail              text,
    provider_message_id text,
    -- Whether the message body was handed to the server (after which a lost connection
    -- leaves the outcome unknown).
    body_sent           boolean     NOT NULL DEFAULT false,
    -- False when the worker found its lease gone at completion: its result changed nothing.
    lease_held          boolean     NOT NULL DEFAULT true,
    duration_ms         double precision,
    claimed_at          timestamptz,
    finished_at         timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX delivery_attempts_outbox_idx ON notifier.delivery_attempts (outbox_id, id);
